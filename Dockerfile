# syntax=docker/dockerfile:1
# opsagent's image: the wheel built from this checkout (its playbooks, schemas and the demo incident
# travel inside the package), with PostgreSQL support, run as an unprivileged user.
#   docker build -t opsagent .
#   docker run -e OPSAGENT_WEBHOOK_TOKEN=… -p 8080:8080 opsagent                 # serve (SQLite in /var/lib/opsagent)
#   docker run … opsagent serve --no-workers   /   docker run … opsagent worker  # with store_url: postgresql://…
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY opsagent opsagent
COPY adapters adapters
COPY playbooks playbooks
COPY fixtures/schema fixtures/schema
COPY fixtures/incidents/order-service-threadpool-config fixtures/incidents/order-service-threadpool-config
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OPSAGENT_HOST=0.0.0.0 \
    OPSAGENT_PORT=8080 \
    OPSAGENT_DATA_DIR=/var/lib/opsagent
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir "$(ls /wheels/*.whl)[postgresql]" \
    && rm -rf /wheels \
    && groupadd --system --gid 10001 opsagent \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/opsagent --create-home opsagent
USER 10001:10001
WORKDIR /var/lib/opsagent
EXPOSE 8080
# ready: the store can be written and, where this process runs investigations, the dispatcher runs
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('OPSAGENT_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["opsagent"]
CMD ["serve"]

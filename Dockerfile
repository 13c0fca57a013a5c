# syntax=docker/dockerfile:1
# One image for every role: `serve` (the default), `job NAME`, `relay`, `consume NAME`,
# `migrate`. Two stages: the first builds the project and its runtime dependencies
# (pyproject.toml's [project.dependencies], never the dev extra) into a virtualenv; the
# second is a slim Python with only that virtualenv, run as an unprivileged user.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /opt/pin-sessions \
    && /opt/pin-sessions/bin/pip install . \
    && /opt/pin-sessions/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE} AS runtime
# A fixed uid so Kubernetes' runAsNonRoot can check it without a name lookup.
RUN groupadd --system --gid 10001 pin \
    && useradd --system --uid 10001 --gid pin --no-create-home --home-dir /nonexistent pin
COPY --from=build /opt/pin-sessions /opt/pin-sessions
# Production by default: a secret and PIN_DATABASE_URL are required, development codes
# are refused. PIN_DATA_DIR is only written in development; /tmp keeps it writable.
ENV PATH=/opt/pin-sessions/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIN_ENV=prod \
    PIN_DATA_DIR=/tmp/pin
USER 10001:10001
WORKDIR /tmp
# 8000: the API (and its /metrics); 9100: the metrics port of the worker roles.
EXPOSE 8000 9100
# For the default role; compose and Kubernetes probe each worker role's metrics port.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
ENTRYPOINT ["pin-sessions"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]

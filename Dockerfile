# streamfix as a container: a sidecar next to opencode / Open WebUI, or standalone.
# NOT BUILT on the development machines (no Docker engine there): tests/test_container_files.py
# checks this file statically, and the first real build is the first real test. See README,
# "Running as a sidecar".
#
#   docker build -t streamfix .
#   docker run --rm -p 127.0.0.1:8080:8080 streamfix                  # serve (Gemini upstream)
#   docker run --rm streamfix config                                  # the effective config

# ── Stage 1: dependencies only ───────────────────────────────────────────────
# Only pyproject.toml is copied before installing, so this layer (and the one the runtime
# stage copies out of it) is rebuilt when the dependencies change, not on every code change.
# Every dependency installs from a binary wheel (--only-binary), so no compiler is ever needed,
# and none is in the slim image to be left behind.
FROM python:3.12-slim AS deps
WORKDIR /build
COPY pyproject.toml ./
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print('\n'.join(deps))" > requirements.txt \
    && python -m venv /opt/streamfix \
    && /opt/streamfix/bin/pip install --no-cache-dir --disable-pip-version-check \
        --only-binary=:all: -r requirements.txt

# ── Stage 2: runtime ─────────────────────────────────────────────────────────
FROM python:3.12-slim
RUN groupadd --system --gid 10001 streamfix \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin streamfix
COPY --from=deps /opt/streamfix /opt/streamfix
WORKDIR /app
# The source: the only layer a code change rebuilds. Compiled here, as root, because the
# container runs read-only as an unprivileged user.
COPY proxy ./proxy
RUN python -m compileall -q proxy
# Every file of config/: streamfix.toml (the documented defaults) and streamfix.redis.toml
# (the shared signature store, for compose's redis profile). Compose mounts ./config here too.
COPY config/ /etc/streamfix/
# Inside a container the proxy must listen on all interfaces to be reachable at all; publish
# the port only where the clients are (compose keeps it on the host's loopback).
ENV PATH=/opt/streamfix/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STREAMFIX_HOST=0.0.0.0 \
    STREAMFIX_PORT=8080 \
    STREAMFIX_CONFIG=/etc/streamfix/streamfix.toml
USER 10001:10001
EXPOSE 8080
# No curl in the slim image: the health check is a few lines of Python against /healthz.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('STREAMFIX_PORT', '8080'); sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status != 200)"]
# `python -m proxy` is the `streamfix` command (proxy/__main__.py calls proxy.cli:main), so
# `docker run IMAGE config` and `docker run IMAGE serve --workers 2` work as documented.
ENTRYPOINT ["python", "-m", "proxy"]
CMD ["serve"]

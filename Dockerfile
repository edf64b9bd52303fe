# streamfix as a container: a sidecar next to opencode / Open WebUI, or standalone.
# NOT BUILT on the development machines (no Docker engine there): tests/test_container_files.py
# checks this file statically, and the first real build is the first real test. See README,
# "Running as a sidecar".
#
#   docker build -t streamfix .
#   docker run --rm -p 127.0.0.1:8080:8080 streamfix                  # serve (Gemini upstream)
#   docker run --rm streamfix config                                  # the effective config

# ── Stage 1: build ───────────────────────────────────────────────────────────
# Python 3.11, pinned to a patch release: the tests run on 3.11 (3.11.7 on the development
# machines and CI), and 3.11.15 is the same minor version with its security fixes. Bump both
# stages together, and only to a minor version the tests run on.
FROM python:3.11.15-slim AS deps
WORKDIR /build
# Dependencies first, from pyproject.toml and the pins alone, so this layer is rebuilt when
# they change and not on every code change. Every version comes from config/constraints.txt
# (tests/test_container_files.py checks it covers pyproject's dependencies), and everything
# installs from a binary wheel (--only-binary), so no compiler is ever needed or left behind.
# setuptools is the pinned build backend for the step below.
COPY pyproject.toml ./
COPY config/constraints.txt ./config/constraints.txt
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print('\n'.join(deps))" > requirements.txt \
    && python -m venv /opt/streamfix \
    && /opt/streamfix/bin/pip install --no-cache-dir --disable-pip-version-check \
        --only-binary=:all: -c config/constraints.txt -r requirements.txt setuptools
# Then the package itself, so `streamfix` is on the PATH: no dependency is resolved again
# (--no-deps) and nothing is downloaded (--no-index, the pinned setuptools already in the venv
# builds it, --no-build-isolation). `pip check` fails the build if the pins and pyproject's
# ranges disagree. README.md is the package's long description (pyproject's `readme`).
COPY README.md ./
COPY proxy ./proxy
RUN /opt/streamfix/bin/pip install --no-cache-dir --disable-pip-version-check \
        --no-deps --no-index --no-build-isolation -c config/constraints.txt . \
    && /opt/streamfix/bin/pip check

# ── Stage 2: runtime ─────────────────────────────────────────────────────────
FROM python:3.11.15-slim
RUN groupadd --system --gid 10001 streamfix \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin streamfix
# The venv holds the dependencies and the installed package (compiled by pip, as root here,
# because the container runs read-only as an unprivileged user).
COPY --from=deps /opt/streamfix /opt/streamfix
WORKDIR /app
# Every file of config/: streamfix.toml (the documented defaults) and streamfix.redis.toml
# (the shared signature store, for compose's redis profile), and constraints.txt, which only
# the build reads. Compose mounts ./config here too.
COPY config/ /etc/streamfix/
# Inside a container the proxy must listen on all interfaces to be reachable at all; publish
# the port only where the clients are (compose keeps it on the host's loopback).
ENV PATH=/opt/streamfix/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STREAMFIX_HOST=0.0.0.0 \
    STREAMFIX_PORT=8080 \
    STREAMFIX_CONFIG=/etc/streamfix/streamfix.toml
USER 10001:10001
EXPOSE 8080
# No curl in the slim image: the health check is a few lines of Python against /healthz, on
# the port the server listens on (STREAMFIX_PORT, the variable the server reads, so
# `docker run -e STREAMFIX_PORT=9000` moves both). A port set only in the config file
# (server.port) is not followed: set STREAMFIX_PORT instead.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('STREAMFIX_PORT', '8080'); sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status != 200)"]
# The installed `streamfix` command (pyproject's [project.scripts], proxy.cli:main), so
# `docker run IMAGE config` and `docker run IMAGE serve --workers 2` work as documented.
ENTRYPOINT ["streamfix"]
CMD ["serve"]

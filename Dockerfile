# streamfix as a container (a sidecar next to opencode / Open WebUI, or standalone).
# Not built on the development machines (no Docker engine there); see README.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
RUN useradd --system --uid 10001 --no-create-home streamfix
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY config/streamfix.toml /etc/streamfix/streamfix.toml
USER 10001
# Inside a container the proxy must listen on all interfaces to be reachable at all;
# publish the port only where the clients are (compose keeps it on the pod network).
ENV STREAMFIX_HOST=0.0.0.0 \
    STREAMFIX_PORT=8080 \
    STREAMFIX_CONFIG=/etc/streamfix/streamfix.toml \
    PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["streamfix"]
CMD ["serve"]

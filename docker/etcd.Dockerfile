# etcd for the compose cluster, from Debian's etcd-server package (the same
# etcd the tests use). With registry access you may use an official etcd
# image instead (gcr.io/etcd-development/etcd): compose.yaml only needs
# `etcd` on the PATH and curl for the health check.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends etcd-server curl \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 etcd \
 && useradd --system --uid 10001 --gid etcd --home-dir /var/lib/etcd etcd \
 && mkdir -p /var/lib/etcd && chown etcd:etcd /var/lib/etcd && chmod 700 /var/lib/etcd
USER etcd
EXPOSE 2379 2380
HEALTHCHECK --interval=2s --timeout=3s --start-period=20s --retries=5 \
    CMD curl -fsS http://127.0.0.1:2379/health || exit 1
ENTRYPOINT ["etcd"]

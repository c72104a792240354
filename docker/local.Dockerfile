# The images docker/build-local.sh builds where nothing can be pulled: FROM a
# base imported from a root filesystem the script assembles (the host's
# /bin/sh, curl and the shared libraries they and the binaries need), with a
# host-built strobe (and Debian's etcd). Same users, ports, health checks,
# entry point and configuration as docker/Dockerfile and etcd.Dockerfile.
# The build context is the staging directory the script makes.
ARG BASE=strobe-base:local

FROM ${BASE} AS etcd
COPY bin/etcd /usr/bin/etcd
USER 10001:10001
EXPOSE 2379 2380
HEALTHCHECK --interval=2s --timeout=3s --start-period=20s --retries=5 \
    CMD curl -fsS http://127.0.0.1:2379/health || exit 1
ENTRYPOINT ["etcd"]

FROM ${BASE} AS strobe
COPY bin/strobe /usr/local/bin/strobe
COPY entrypoint.sh /usr/local/bin/strobe-entrypoint
COPY strobe.toml /etc/strobe/strobe.toml
USER 10001:10001
WORKDIR /var/lib/strobe
EXPOSE 6650 6651 8080 8443
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=4s --start-period=60s --retries=3 \
    CMD curl -fsS "http://127.0.0.1:${STROBE_HTTP_PORT:-8080}/admin/v2/brokers/health" || exit 1
ENTRYPOINT ["/usr/local/bin/strobe-entrypoint"]

# counterd container image: the static counterd and counterctl binaries
# (CGO_ENABLED=0) and a CA bundle on an empty base. FROM scratch is not
# pulled from any registry, so the build works offline:
#
#   make image                 # = scripts/image-context.sh bin/image && docker build -t counterd:VERSION bin/image
#
# The context (bin/image) is made by scripts/image-context.sh; building
# this file from the repository root does not work, the binaries are not
# there. Run it with a tokens file (docs/security.md), or -e
# COUNTERD_INSECURE=1 to serve without authentication:
#
#   docker run -p 8080:8080 -p 6380:6380 -v counterd-data:/data \
#     -v $PWD/tokens.yaml:/etc/counterd/tokens.yaml:ro counterd:VERSION --auth /etc/counterd/tokens.yaml
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY counterd counterctl /usr/local/bin/
COPY --chown=65532:65532 data /data
# Every flag has a COUNTERD_* variable (counterd -h); these listen on all
# interfaces of the container and keep state in the /data volume.
ENV COUNTERD_DATA=/data \
    COUNTERD_HTTP=0.0.0.0:8080 \
    COUNTERD_RESP=0.0.0.0:6380 \
    COUNTERD_GRPC=0.0.0.0:9090 \
    COUNTERD_GOSSIP=0.0.0.0:7946 \
    COUNTERD_LOG_FORMAT=json
USER 65532:65532
VOLUME ["/data"]
EXPOSE 8080 6380 9090 7946/tcp 7946/udp
ENTRYPOINT ["/usr/local/bin/counterd"]

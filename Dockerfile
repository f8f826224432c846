# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -tags vtprotobuf -ldflags "-s -w -X main.version=${VERSION}" -o /out/sentinel . && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/demo-backend ./loadtest/backend

# The demo backend, for deploy/compose.yaml: docker build --target demo-backend .
FROM gcr.io/distroless/static-debian12:nonroot AS demo-backend
COPY --from=build /out/demo-backend /usr/local/bin/demo-backend
# Numeric (distroless' nonroot user): kubelet refuses runAsNonRoot for an image
# whose user is a name, since it cannot tell that the name is not root.
USER 65532:65532
EXPOSE 9000
ENTRYPOINT ["/usr/local/bin/demo-backend", "-listen", ":9000"]

# The gateway (the default target).
FROM gcr.io/distroless/static-debian12:nonroot AS sentinel
COPY --from=build /out/sentinel /usr/local/bin/sentinel
# A minimal configuration: no tenants, no keys, proxy on :8080, admin API on
# :9090 (all interfaces). It refuses to start until the environment sets
# SENTINEL_UPSTREAMS_API_TARGETS (the backend) and SENTINEL_SERVER_ADMIN_TOKEN.
COPY deploy/sentinel.yaml /etc/sentinel/config.yaml
# Numeric (distroless' nonroot user), as deploy/k8s/deployment.yaml's runAsUser.
USER 65532:65532
ENV SENTINEL_CONFIG=/etc/sentinel/config.yaml
EXPOSE 8080 9090
HEALTHCHECK --interval=10s --timeout=2s --retries=3 CMD ["/usr/local/bin/sentinel", "-healthcheck"]
ENTRYPOINT ["/usr/local/bin/sentinel"]

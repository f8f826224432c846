# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/sentinel .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sentinel /usr/local/bin/sentinel
COPY config.yaml /etc/sentinel/config.yaml
USER nonroot:nonroot
# The admin listener must be reachable by the health check inside the container;
# bind it to loopback (the default) and protect it with a token when exposing it.
ENV SENTINEL_CONFIG=/etc/sentinel/config.yaml \
    SENTINEL_SERVER_LISTEN=:8080
EXPOSE 8080 9090
HEALTHCHECK --interval=10s --timeout=2s --retries=3 CMD ["/usr/local/bin/sentinel", "-healthcheck"]
ENTRYPOINT ["/usr/local/bin/sentinel"]

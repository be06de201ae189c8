# The demo worker of docker-compose.yml, built from this repository:
#   docker build -f deploy/demo-worker.Dockerfile -t baton-demo-worker:local .
# Only the library module is needed (integration/ is a separate module and is not copied, see
# demo-worker.Dockerfile.dockerignore). The binary is static; the runtime image holds nothing else
# but CA certificates (for BATON_*_CA_FILE-less TLS to managed services).
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/demo-worker ./cmd/demo-worker

FROM debian:12.11-slim
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/demo-worker /usr/local/bin/demo-worker
# nobody: the worker needs no privileges and writes no files.
USER 65534:65534
ENV BATON_HTTP_ADDR=:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/demo-worker"]
CMD ["run"]

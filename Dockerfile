# The peloton binary, and the slim peloton-hostagent of the DaemonSet, for
# deploy/kubernetes:
#   docker build -t <repository>:<tag> .
# A static build (no cgo) on an empty base: no shell, no package manager,
# nothing to patch but Peloton itself. It runs as a non-root user and needs
# no writable folder but /tmp, which the Deployment mounts.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/peloton-sched/peloton/cmd/peloton/cli.Version=${VERSION}" \
    -o /out/peloton ./cmd/peloton && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o /out/peloton-hostagent ./cmd/peloton-hostagent

FROM scratch
COPY --from=build /out/peloton /out/peloton-hostagent /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/peloton"]

# The operator image: a static binary on distroless, running as non-root.
#   docker build -t wasmreconcile/operator .
# Modules are not baked in: ReconcileModule objects bring them (a mounted
# volume, a ConfigMap or Secret, or a URL), pinned by sha256.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY guest-sdk/ guest-sdk/
RUN go mod download
COPY . .
# The run build: only run and version, so that the offline commands' code is
# neither linked nor initialized (RATIONALE.md, "Why does the image ship a
# run build?").
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -tags runonly -o /out/operator ./cmd/operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/operator /operator
USER 65532:65532
ENTRYPOINT ["/operator"]
CMD ["run", "--reconcile-modules"]

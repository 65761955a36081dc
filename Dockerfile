# The manager image: a static `mcm` binary on distroless, running as a non-root user.
#   make docker-build            (docker build -t ghcr.io/gardener/cluster-api-provider-mcm:v<version> .)
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
# glibc linked statically: the image has no libc. Every cloud driver is compiled in (the default features).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$(uname -m)-unknown-linux-gnu" \
 && cp "target/$(uname -m)-unknown-linux-gnu/release/mcm" /mcm

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /mcm /mcm
USER 65532:65532
ENTRYPOINT ["/mcm"]
CMD ["run"]

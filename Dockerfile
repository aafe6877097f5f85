# One image for every paysaga process: the five services and the `paysaga` tool
# (used here for the one-shot database bootstrap). Multi-stage: the toolchain and the
# build cache stay in the first stage; the runtime image holds only the binaries.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release -p account -p member -p order -p gate -p orchestrator -p paysaga \
        --bin account --bin member --bin order --bin gate --bin orchestrator --bin paysaga \
 && mkdir -p /out \
 && cp target/release/account target/release/member target/release/order target/release/gate \
       target/release/orchestrator target/release/paysaga /out/

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home paysaga
COPY --from=build /out/ /usr/local/bin/
USER paysaga
ENV RUST_LOG=info \
    LOG_FORMAT=json \
    PAYSAGA_BIN_DIR=/usr/local/bin
# Each service in docker-compose.yml picks its binary with `command:`.
CMD ["paysaga", "--help"]

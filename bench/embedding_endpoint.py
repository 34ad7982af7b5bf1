"""Dense embedding throughput: the local model against an OpenAI-compatible endpoint, and how the endpoint's
throughput scales with the requests a worker keeps in flight (HEADWATER_DENSE_ENDPOINT_CONCURRENCY; in
the fleet, the embed.dense pool's threads times its replicas, each process bounded by that setting).

The endpoint is llama.cpp's server on loopback (tests/integration/embedding_service.py: SmolLM2-135M
with mean pooling, the only GGUF the package registry ships), reached directly and through a proxy
that adds a fixed round-trip latency, as a service across a network has. Texts are 900-character
pieces of the standard library's email package, the size of a chunk. The service's own speed is
not the point (a GPU service is far faster than this CPU one): the point is what a worker does
with the time it spends waiting.

    python -m bench.embedding_endpoint [--texts 8] [--short-texts 16] [--batch-size 4] [--concurrency 1,2,4,8] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def _rate(embed, texts: list[str]) -> tuple[float, float]:  # noqa: ANN001
    """(texts per second, seconds) of one call over all texts."""
    started = time.perf_counter()
    embed(texts)
    seconds = time.perf_counter() - started
    return len(texts) / seconds, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=8, help="chunk-sized texts for local against endpoint")
    parser.add_argument("--short-texts", type=int, default=16, help="one-line texts for the concurrency curve")
    parser.add_argument("--batch-size", type=int, default=4, help="texts per request (local against endpoint)")
    parser.add_argument("--concurrency", default="1,2,4,8", help="requests in flight to try")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the proxy adds to each request")
    parser.add_argument("--server-threads", type=int, default=1, help="llama.cpp's threads")
    args = parser.parse_args()

    from bench.dense_int8_kernels import email_pieces
    from tests.integration.embedding_service import MODEL_ALIAS, FaultyProxy, llama_embedding_server
    from headwater.pipeline.embed_dense import DenseEmbedder
    from headwater.pipeline.embed_endpoint import EndpointEmbedder

    texts = email_pieces(args.texts)
    short = [f"Rotate deployment token {i} and record who did it." for i in range(args.short_texts)]
    local = DenseEmbedder(threads=1)
    local.embed(texts[:2])  # warm
    local_rate, local_seconds = _rate(local.embed, texts)

    with tempfile.TemporaryDirectory() as workdir, \
            llama_embedding_server(Path(workdir), threads=args.server_threads) as service:
        embedder = EndpointEmbedder(service, MODEL_ALIAS, batch_size=args.batch_size, concurrency=1)
        embedder.embed(texts[:1])  # connect, learn the size
        endpoint_rate, endpoint_seconds = _rate(embedder.embed, texts)
        embedder.close()
        proxy = FaultyProxy(service, latency=args.latency)
        curve = []
        try:
            for concurrency in [int(c) for c in args.concurrency.split(",")]:
                embedder = EndpointEmbedder(proxy.url, MODEL_ALIAS, batch_size=1, concurrency=concurrency)
                embedder.embed(short[:1])
                rate, seconds = _rate(embedder.embed, short)
                curve.append((concurrency, rate, seconds))
                embedder.close()
        finally:
            proxy.close()
    print(f"{len(texts)} chunk-sized texts (~900 characters of the stdlib email package), one run:")
    print(f"  local all-MiniLM-L6-v2 (int8, 1 thread, in process): {local_rate:7.1f} texts/s ({local_seconds:.2f} s)")
    print(f"  endpoint: llama.cpp server, SmolLM2-135M mean-pooled ({args.server_threads} thread), "
          f"{args.batch_size} texts per request: {endpoint_rate:7.2f} texts/s ({endpoint_seconds:.2f} s)")
    print(f"{len(short)} one-line texts, one per request, through a proxy adding {args.latency * 1000:.0f} ms "
          "a round trip (a service across a network with room to spare):")
    print(f"  {'in flight':>9} {'texts/s':>8} {'seconds':>8} {'speed-up':>8}")
    for concurrency, rate, seconds in curve:
        print(f"  {concurrency:>9} {rate:>8.1f} {seconds:>8.2f} {rate / curve[0][1]:>7.1f}x")


if __name__ == "__main__":
    main()

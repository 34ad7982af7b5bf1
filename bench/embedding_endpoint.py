"""Dense embedding throughput: the local model against an OpenAI-compatible endpoint, and how the endpoint's
throughput scales with the requests a worker keeps in flight (HEADWATER_DENSE_ENDPOINT_CONCURRENCY; in
the fleet, the embed.dense pool's threads times its replicas, each process bounded by that setting).

The endpoint is llama.cpp's server on loopback (tests/integration/embedding_service.py: SmolLM2-135M
with mean pooling, the only GGUF the package registry ships), reached directly and through a proxy
that adds a fixed round-trip latency, as a service across a network has. Texts are 900-character
pieces of the standard library's email package, the size of a chunk. The service's own speed is
not the point (a GPU service is far faster than this CPU one): the point is what a worker does
with the time it spends waiting.

    python -m bench.embedding_endpoint [--texts 48] [--batch-size 4] [--concurrency 1,2,4,8] [--latency 0.1]
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
    parser.add_argument("--texts", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=4, help="texts per request")
    parser.add_argument("--concurrency", default="1,2,4,8", help="requests in flight to try")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds the proxy adds to each request")
    parser.add_argument("--server-threads", type=int, default=1, help="llama.cpp's threads")
    args = parser.parse_args()

    from bench.dense_int8_kernels import email_pieces
    from tests.integration.embedding_service import MODEL_ALIAS, FaultyProxy, llama_embedding_server
    from workers.embed_dense import DenseEmbedder
    from workers.embed_endpoint import EndpointEmbedder

    texts = email_pieces(args.texts)
    local = DenseEmbedder(threads=1)
    local.embed(texts[:2])  # warm
    rate, seconds = _rate(local.embed, texts)
    print(f"{len(texts)} texts of ~900 characters")
    print(f"local all-MiniLM-L6-v2 (int8, 1 thread, in process): {rate:7.1f} texts/s ({seconds:.2f} s)")

    with tempfile.TemporaryDirectory() as workdir, \
            llama_embedding_server(Path(workdir), threads=args.server_threads) as service:
        proxy = FaultyProxy(service, latency=args.latency)
        try:
            rows = []
            for where, url in (("loopback", service), (f"+{args.latency * 1000:.0f} ms round trip", proxy.url)):
                for concurrency in [int(c) for c in args.concurrency.split(",")]:
                    embedder = EndpointEmbedder(url, MODEL_ALIAS, batch_size=args.batch_size, concurrency=concurrency)
                    embedder.embed(texts[:1])  # connect, learn the size
                    rate, seconds = _rate(embedder.embed, texts)
                    rows.append((where, concurrency, rate, seconds, embedder.requests_sent - 1))
                    embedder.close()
        finally:
            proxy.close()
    print(f"endpoint: llama.cpp server, SmolLM2-135M mean-pooled ({args.server_threads} thread), "
          f"{args.batch_size} texts per request")
    print(f"{'service':>22} {'in flight':>9} {'texts/s':>8} {'seconds':>8} {'requests':>8}")
    for where, concurrency, rate, seconds, requests in rows:
        print(f"{where:>22} {concurrency:>9} {rate:>8.1f} {seconds:>8.2f} {requests:>8}")


if __name__ == "__main__":
    main()

"""Sources: the one model of a configured source and the one way from it to a connector.

model holds SourceConfig (validated once, whatever surface a source comes through: headwater.toml,
the REST API, the dashboard, the CLI) and the sources declared in headwater.toml; build turns a
source, a URL or a folder into a connector of this process (never indexing the embedded Chroma
directory itself, keeping a crawl's state next to it).
"""

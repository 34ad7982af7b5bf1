"""The HTTP app (`headwater serve`): REST API, admin dashboard, per-source schedules; webhooks next."""

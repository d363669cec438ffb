"""The stores behind the `World` port: `memory`, `local` (files under a data directory) and
`postgres` (a PostgreSQL schema). Each only stores; what they share is in the world's core."""

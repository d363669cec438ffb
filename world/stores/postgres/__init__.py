"""`PostgresWorld`: the world in a PostgreSQL schema (`world`; psycopg is imported only by it,
on first use). Its parts: `urls`, `connection`, `owners` (a lease and
one family's commit; when it commits is the core's `CommitQueue`), `streams`, `listener`,
`sql`, `schema`, `rows`, `verify`."""

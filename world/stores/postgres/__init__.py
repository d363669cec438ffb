"""`PostgresWorld`: the world in a PostgreSQL schema (`world`; psycopg is imported only by it,
on first use). Its parts: `urls`, `connection`, `batches`, `threads`, `sql`, `schema`,
`verify`."""

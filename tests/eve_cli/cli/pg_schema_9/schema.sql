-- The PostgreSQL schema of eve's last pre-release (schema version 9), frozen: its nine
-- migrations as they were applied, in order ({s}: the quoted schema). A test makes a
-- database of this form and converts it (world/stores/postgres/convert.py).

CREATE TABLE {s}.schema_version (
    version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now()
);

-- migration 1
CREATE TABLE {s}.families (
    root text PRIMARY KEY,
    next_pos bigint NOT NULL,           -- position of the family's next record
    inbox_next bigint NOT NULL DEFAULT 0,  -- id of the next delivery
    epoch bigint NOT NULL DEFAULT 0,    -- lease epoch: +1 at every acquire (fencing)
    owner text,                         -- the world object holding the lease, or NULL
    owner_key bigint,                   -- the advisory lock its owner holds while alive
    holder text,                        -- the acquire call that took it (retries)
    lease_until timestamptz,
    created_by text,                    -- the create call (retries)
    created timestamptz NOT NULL DEFAULT now()
);
-- The head apart from the counters every append updates (a row version each time).
CREATE TABLE {s}.heads (
    root text PRIMARY KEY,
    head bytea NOT NULL,
    updated timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE {s}.records (
    root text NOT NULL,
    pos bigint NOT NULL,
    frame bytea NOT NULL,
    PRIMARY KEY (root, pos)
);
CREATE TABLE {s}.inbox (
    root text NOT NULL,
    id bigint NOT NULL,
    frame bytea NOT NULL,
    key uuid NOT NULL,                  -- the deliver call (retries)
    PRIMARY KEY (root, id)
);
CREATE TABLE {s}.hooks (
    token text PRIMARY KEY,
    run_id text NOT NULL,
    root text NOT NULL
);
CREATE INDEX hooks_root ON {s}.hooks (root);
CREATE TABLE {s}.streams (
    name text PRIMARY KEY,
    length bigint NOT NULL,
    root text                           -- the family it belongs to (`kind.<run id>`)
);
CREATE INDEX streams_root ON {s}.streams (root) WHERE root IS NOT NULL;
CREATE TABLE {s}.stream_items (
    name text NOT NULL,
    idx bigint NOT NULL,
    frame bytea NOT NULL,
    PRIMARY KEY (name, idx)
);

-- migration 2
CREATE FUNCTION {s}.write_batch(
    p_root text, p_epoch bigint, p_first bigint, p_frames bytea[],
    p_names text[], p_idx bigint[], p_items bytea[], p_lazy boolean, p_chan text
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    f_epoch bigint;
    f_next bigint;
    n_rec integer := coalesce(array_length(p_frames, 1), 0);
    st record;
    cur bigint;
BEGIN
    IF p_lazy THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    -- The row lock makes a takeover (which updates the row) wait for this write.
    SELECT epoch, next_pos INTO f_epoch, f_next FROM {s}.families
        WHERE root = p_root FOR SHARE;
    IF NOT FOUND OR f_epoch <> p_epoch THEN
        RETURN 1;
    END IF;
    IF n_rec > 0 AND f_next <> p_first THEN
        RETURN 2;
    END IF;
    FOR st IN SELECT u.n, min(u.i) AS first, count(*) AS cnt
            FROM unnest(p_names, p_idx) AS u(n, i) GROUP BY u.n LOOP
        SELECT length INTO cur FROM {s}.streams WHERE name = st.n FOR UPDATE;
        IF coalesce(cur, 0) <> st.first THEN
            RETURN 3;
        END IF;
    END LOOP;
    IF n_rec > 0 THEN
        UPDATE {s}.families SET next_pos = next_pos + n_rec WHERE root = p_root;
        INSERT INTO {s}.records (root, pos, frame)
            SELECT p_root, p_first + u.i - 1, u.frame
            FROM unnest(p_frames) WITH ORDINALITY AS u(frame, i);
    END IF;
    IF coalesce(array_length(p_names, 1), 0) > 0 THEN
        INSERT INTO {s}.streams AS s (name, length, root)
            SELECT u.n, max(u.i) + 1, p_root FROM unnest(p_names, p_idx) AS u(n, i)
            GROUP BY u.n
            ON CONFLICT (name) DO UPDATE SET length = excluded.length;
        INSERT INTO {s}.stream_items (name, idx, frame)
            SELECT * FROM unnest(p_names, p_idx, p_items);
        PERFORM pg_notify(p_chan, 's' || n) FROM (SELECT DISTINCT unnest(p_names) AS n) d;
    END IF;
    RETURN 0;
END
$$;

-- migration 3
ALTER TABLE {s}.families ADD COLUMN due double precision DEFAULT '-Infinity',
    ADD COLUMN hook_mark bigint;
CREATE INDEX families_due ON {s}.families (due) WHERE due IS NOT NULL;

-- migration 4
CREATE TABLE {s}.quarantine (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL,                 -- journal | inbox | stream | head | hook
    location text NOT NULL,             -- what it was: `<root> at <position>`, ...
    data bytea NOT NULL,
    note text NOT NULL
);

-- migration 5
COMMENT ON SCHEMA {s} IS 'eve world, store format 2';

-- migration 6
CREATE OR REPLACE FUNCTION {s}.write_batch(
    p_root text, p_epoch bigint, p_first bigint, p_frames bytea[],
    p_names text[], p_idx bigint[], p_items bytea[], p_lazy boolean, p_chan text
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n_rec integer := coalesce(array_length(p_frames, 1), 0);
BEGIN
    IF p_lazy THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    UPDATE {s}.families SET next_pos = next_pos + n_rec
        WHERE root = p_root AND epoch = p_epoch AND (n_rec = 0 OR next_pos = p_first);
    IF NOT FOUND THEN
        PERFORM 1 FROM {s}.families WHERE root = p_root AND epoch = p_epoch;
        RETURN CASE WHEN FOUND THEN 2 ELSE 1 END;
    END IF;
    IF n_rec > 0 THEN
        INSERT INTO {s}.records (root, pos, frame)
            SELECT p_root, p_first + u.i - 1, u.frame
            FROM unnest(p_frames) WITH ORDINALITY AS u(frame, i);
    END IF;
    IF coalesce(array_length(p_names, 1), 0) > 0 THEN
        INSERT INTO {s}.streams AS s (name, length, root)
            SELECT u.n, max(u.i) + 1, p_root FROM unnest(p_names, p_idx) AS u(n, i)
            GROUP BY u.n
            ON CONFLICT (name) DO UPDATE SET length = greatest(s.length, excluded.length);
        INSERT INTO {s}.stream_items (name, idx, frame)
            SELECT * FROM unnest(p_names, p_idx, p_items);
        PERFORM pg_notify(p_chan, string_agg(DISTINCT 's' || n, ' '))
            FROM unnest(p_names) AS n;
    END IF;
    RETURN 0;
END
$$;

-- migration 7
CREATE TABLE IF NOT EXISTS {s}.tails (
    root text NOT NULL,
    key bigint NOT NULL,
    PRIMARY KEY (root, key)
);
DROP FUNCTION IF EXISTS {s}.write_batch(text, bigint, bigint, bytea[], text[], bigint[],
    bytea[], boolean, text);
CREATE OR REPLACE FUNCTION {s}.write_batch(
    p_root text, p_epoch bigint, p_first bigint, p_frames bytea[],
    p_names text[], p_idx bigint[], p_items bytea[], p_lazy boolean, p_chan text,
    p_key bigint
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n_rec integer := coalesce(array_length(p_frames, 1), 0);
BEGIN
    IF p_lazy THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    UPDATE {s}.families SET next_pos = next_pos + n_rec
        WHERE root = p_root AND epoch = p_epoch AND (n_rec = 0 OR next_pos = p_first);
    IF NOT FOUND THEN
        PERFORM 1 FROM {s}.families WHERE root = p_root AND epoch = p_epoch;
        RETURN CASE WHEN FOUND THEN 2 ELSE 1 END;
    END IF;
    IF n_rec > 0 THEN
        INSERT INTO {s}.records (root, pos, frame)
            SELECT p_root, p_first + u.i - 1, u.frame
            FROM unnest(p_frames) WITH ORDINALITY AS u(frame, i);
    END IF;
    IF coalesce(array_length(p_names, 1), 0) > 0 THEN
        INSERT INTO {s}.streams AS s (name, length, root)
            SELECT u.n, max(u.i) + 1, p_root FROM unnest(p_names, p_idx) AS u(n, i)
            GROUP BY u.n
            ON CONFLICT (name) DO UPDATE SET length = greatest(s.length, excluded.length);
        INSERT INTO {s}.stream_items (name, idx, frame)
            SELECT * FROM unnest(p_names, p_idx, p_items);
        IF EXISTS (SELECT 1 FROM {s}.tails WHERE root = p_root AND key <> p_key) THEN
            PERFORM pg_notify(p_chan, string_agg(DISTINCT 's' || n, ' '))
                FROM unnest(p_names) AS n;
        END IF;
    END IF;
    RETURN 0;
END
$$;

-- migration 8
ALTER TABLE {s}.streams ADD COLUMN IF NOT EXISTS made uuid NOT NULL
        DEFAULT gen_random_uuid(),
    ADD COLUMN IF NOT EXISTS rewrites bigint NOT NULL DEFAULT 0;
CREATE OR REPLACE FUNCTION {s}.stream_rewritten() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {s}.streams SET rewrites = rewrites + 1
        WHERE name IN (SELECT DISTINCT name FROM old_items);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS stream_items_updated ON {s}.stream_items;
CREATE TRIGGER stream_items_updated AFTER UPDATE ON {s}.stream_items
    REFERENCING OLD TABLE AS old_items
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.stream_rewritten();
DROP TRIGGER IF EXISTS stream_items_deleted ON {s}.stream_items;
CREATE TRIGGER stream_items_deleted AFTER DELETE ON {s}.stream_items
    REFERENCING OLD TABLE AS old_items
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.stream_rewritten();

-- migration 9
CREATE OR REPLACE FUNCTION {s}.write_batch(
    p_root text, p_epoch bigint, p_first bigint, p_frames bytea[],
    p_names text[], p_idx bigint[], p_items bytea[], p_lazy boolean, p_chan text,
    p_key bigint
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n_rec integer := coalesce(array_length(p_frames, 1), 0);
    n_items integer := coalesce(array_length(p_names, 1), 0);
BEGIN
    IF n_items > 0 AND EXISTS (
        SELECT 1 FROM (SELECT u.n, min(u.i) AS first FROM unnest(p_names, p_idx) AS u(n, i)
            GROUP BY u.n) b
        LEFT JOIN {s}.streams st ON st.name = b.n
        WHERE coalesce(st.length, 0) <> b.first
    ) THEN
        RETURN 3;
    END IF;
    UPDATE {s}.families SET next_pos = next_pos + n_rec
        WHERE root = p_root AND epoch = p_epoch AND (n_rec = 0 OR next_pos = p_first);
    IF NOT FOUND THEN
        PERFORM 1 FROM {s}.families WHERE root = p_root AND epoch = p_epoch;
        RETURN CASE WHEN FOUND THEN 2 ELSE 1 END;
    END IF;
    IF n_rec > 0 THEN
        INSERT INTO {s}.records (root, pos, frame)
            SELECT p_root, p_first + u.i - 1, u.frame
            FROM unnest(p_frames) WITH ORDINALITY AS u(frame, i);
    END IF;
    IF n_items > 0 THEN
        INSERT INTO {s}.streams AS s (name, length, root)
            SELECT u.n, max(u.i) + 1, p_root FROM unnest(p_names, p_idx) AS u(n, i)
            GROUP BY u.n
            ON CONFLICT (name) DO UPDATE SET length = greatest(s.length, excluded.length);
        INSERT INTO {s}.stream_items (name, idx, frame)
            SELECT * FROM unnest(p_names, p_idx, p_items);
        IF EXISTS (SELECT 1 FROM {s}.tails WHERE root = p_root AND key <> p_key) THEN
            PERFORM pg_notify(p_chan, string_agg(DISTINCT 's' || n, ' '))
                FROM unnest(p_names) AS n;
        END IF;
    END IF;
    RETURN 0;
END
$$;

INSERT INTO {s}.schema_version (version) SELECT generate_series(1, 9);

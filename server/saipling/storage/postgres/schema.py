"""What the PostgreSQL index holds: many projects in one database, each a *workspace* (a key on every row, not a
schema per project), with versioned migrations applied under one advisory lock (two processes opening a new
database at once migrate it once).

- `workspaces`: name -> id and a version bumped by every committed write (what caches are keyed on).
- `files`, `chunks`, `mentions`, `mention_files`, `meta`, `embedding_log`, `search_log`: as on SQLite, per workspace.
- `chunks.tsv`: the keywords of a chunk (text, heading path, identifier parts) under the `saipling` text search
  configuration: the Porter stemmer that SQLite's FTS5 `porter unicode61 remove_diacritics 2` uses, no stop words,
  accents folded and every non-alphanumeric character a separator (`saipling_fold`), so both backends see the same
  terms (markdown.terms.match_key). `chunks.doclen` counts its words (BM25's document length).
- `chunk_vectors.embedding`: a pgvector `vector` of any size; an HNSW index per dimension (partial, on the cast
  expression) is created when a workspace grows large (PostgresStore.build_ann_index).
- `chunk_vectors.level`: the chunk's visibility level as a filter compares it (trimmed, lower case, NULL read as
  `public`), kept by triggers (migration 2): a search whose only condition is the reader's levels reads the vectors
  alone, without a join per vector to `chunks`.
- CJK (migration 3): a run of CJK characters is one token to the parser, and Chinese and Japanese put no spaces
  between words; so a chunk's keywords (and a file's) also hold its runs as overlapping character pairs and each
  run's last character (`saipling_cjk`, the SQL twin of markdown.terms.cjk_bigrams: "冠盖满京华" -> "冠盖 盖满 满京
  京华 华"), as SQLite's `cjk_words` column: a CJK query word, the phrase of its pairs, is found anywhere inside a
  run and never across two.
- Postings (migration 4): `chunk_terms` and `file_terms` hold each lexeme of a chunk's (file's) tsvector as a row
  (workspace, lexeme, chunk or file id, term frequency, document length; a chunk's visibility level too), under a
  btree on (ws, lexeme, id) that carries the rest, kept by statement-level triggers from the tsvectors. A keyword
  search reads the postings of its terms only, its document frequencies are counts of them, and BM25 is summed
  per row (keywords.py): the tsvectors of every matching chunk and file were read, decompressed and searched per
  query before (190 of a 222 ms hybrid search over 16,793 chunks, issue 33).
- `embedding_cache`: shared by every workspace of the database: the same model and text give one vector, ever.
"""

from __future__ import annotations

SCHEMA_VERSION = 5
MIGRATION_LOCK = 0x5A1_9115  # pg_advisory_xact_lock key of the migrations (any constant of our own)

# combining marks removed after NFKD (markdown.terms.fold_text), then anything not a letter or a digit a separator
_FOLD = r"""
CREATE OR REPLACE FUNCTION saipling_fold(text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $fold$
  SELECT regexp_replace(
    regexp_replace(
      normalize($1, NFKD), '[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+', '', 'g'),
    '[^[:alnum:]]+', ' ', 'g')
$fold$;
-- a lexeme's term frequency in a tsvector (1 when stored without positions; 0 when absent), read back from
-- ts_rank: with every weight 1, one lexeme's rank is H2(tf) / (pi^2 / 6), H2(n) = sum of 1/k^2 for k <= n, and
-- pi^2/6 - H2(n) ~ 1 / (n + 1/2): exact for every tf a tsvector holds (<= 256 positions). A binary search in the
-- tsvector, where unnest() read every lexeme (4.4x slower: 440 vs 100 ms over 2,543 SciFact chunks).
CREATE OR REPLACE FUNCTION saipling_tf(tsvector, text) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $tf$
  SELECT round(1 / (1.64493406685 * (1 - ts_rank('{1,1,1,1}', $1, quote_literal($2)::tsquery)::float8)) - 0.5)::int
$tf$;
"""

MIGRATIONS: list[str] = [
    # 1: the initial schema
    _FOLD
    + r"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TEXT SEARCH DICTIONARY saipling_porter (TEMPLATE = snowball, Language = porter);
CREATE TEXT SEARCH CONFIGURATION saipling (PARSER = default);
ALTER TEXT SEARCH CONFIGURATION saipling ADD MAPPING FOR asciiword, word, numword, uint, int,
  hword_asciipart, hword_part, hword_numpart, asciihword, hword, numhword WITH saipling_porter;

CREATE TABLE workspaces(
  id serial PRIMARY KEY, name text UNIQUE NOT NULL, version bigint NOT NULL DEFAULT 0,
  created timestamptz NOT NULL DEFAULT now());
CREATE TABLE meta(ws int NOT NULL REFERENCES workspaces ON DELETE CASCADE, key text NOT NULL, value text,
  PRIMARY KEY (ws, key));
CREATE TABLE files(
  ws int NOT NULL REFERENCES workspaces ON DELETE CASCADE, path text NOT NULL, id bigserial UNIQUE,
  content_hash text NOT NULL, mtime_ns bigint NOT NULL, size bigint NOT NULL, file_type text, encoding text,
  last_indexed double precision, chunk_count int DEFAULT 0, entity_type text, entity_name text, display_name text,
  aliases text, book_id text, chapter_id text, visibility text, corpus text, warning text,
  tsv tsvector, doclen int NOT NULL DEFAULT 0,
  PRIMARY KEY (ws, path));
CREATE INDEX files_tsv ON files USING gin(tsv);
CREATE TABLE chunks(
  id bigserial PRIMARY KEY, ws int NOT NULL REFERENCES workspaces ON DELETE CASCADE, path text NOT NULL,
  chunk_index int NOT NULL, kind text, section_heading text, heading_path text, start_line int, end_line int,
  content_hash text, preview text, token_count int, text text, file_type text, entity_type text, entity_name text,
  book_id text, chapter_id text, chapter_num int, visibility text, corpus text, ident_words text DEFAULT '',
  tsv tsvector, doclen int NOT NULL DEFAULT 0,
  UNIQUE (ws, path, chunk_index));
CREATE INDEX chunks_tsv ON chunks USING gin(tsv);
CREATE INDEX chunks_hash ON chunks(ws, content_hash);
CREATE INDEX chunks_heading ON chunks(ws, lower(trim(ltrim(section_heading, '#'))));
-- a chunk's vector in a narrow table of its own (stored inline, never compressed): an exact search reads only
-- the workspace's vectors, not chunk texts (2x faster than a column of chunks, whose vectors were TOASTed)
CREATE TABLE chunk_vectors(
  chunk_id bigint PRIMARY KEY REFERENCES chunks ON DELETE CASCADE, ws int NOT NULL, embedding vector NOT NULL);
ALTER TABLE chunk_vectors ALTER COLUMN embedding SET STORAGE PLAIN;
CREATE INDEX chunk_vectors_ws ON chunk_vectors(ws);

CREATE FUNCTION saipling_chunk_keywords() RETURNS trigger LANGUAGE plpgsql AS $t$
DECLARE folded text;
BEGIN
  folded := saipling_fold(concat_ws(' ', NEW.text, NEW.heading_path, NEW.ident_words));
  NEW.tsv := to_tsvector('saipling', folded);
  NEW.doclen := coalesce(array_length(regexp_split_to_array(btrim(folded), ' +'), 1), 0);
  RETURN NEW;
END $t$;
CREATE TRIGGER chunks_keywords BEFORE INSERT OR UPDATE OF text, heading_path, ident_words ON chunks
  FOR EACH ROW EXECUTE FUNCTION saipling_chunk_keywords();

CREATE TABLE mentions(
  ws int NOT NULL REFERENCES workspaces ON DELETE CASCADE, path text NOT NULL, entity text NOT NULL,
  line int NOT NULL, col int NOT NULL, end_col int NOT NULL, surface text);
CREATE INDEX mentions_entity ON mentions(ws, entity, path);
CREATE INDEX mentions_path ON mentions(ws, path);
CREATE TABLE mention_files(
  ws int NOT NULL REFERENCES workspaces ON DELETE CASCADE, path text NOT NULL, names_key text NOT NULL, pov text,
  PRIMARY KEY (ws, path));

CREATE TABLE embedding_cache(
  model text NOT NULL, content_hash text NOT NULL, vector bytea NOT NULL, created double precision,
  PRIMARY KEY (model, content_hash));
CREATE TABLE embedding_log(
  id bigserial PRIMARY KEY, ws int NOT NULL REFERENCES workspaces ON DELETE CASCADE, timestamp double precision,
  provider text, model text, tokens bigint, chunks int, cost_usd double precision);
CREATE TABLE search_log(
  id bigserial PRIMARY KEY, ws int NOT NULL REFERENCES workspaces ON DELETE CASCADE, timestamp double precision,
  query text, source text, mode text, results int, top_score double precision, elapsed_ms double precision);
CREATE INDEX search_log_ws ON search_log(ws, id);
-- what the holder of a workspace's writer lock (an advisory lock) is doing, for other processes' status
CREATE TABLE writer_runs(
  ws int PRIMARY KEY REFERENCES workspaces ON DELETE CASCADE, pid int, record text, updated timestamptz);
-- the site owner's analytics, per workspace (source `eval` left out, as SQLite's search_analytics view)
CREATE VIEW search_analytics AS
  SELECT l.*, w.name AS workspace FROM search_log l JOIN workspaces w ON w.id = l.ws WHERE l.source <> 'eval';
""",
    # 2: the chunk's visibility level beside its vector (a KNN filtered by the reader's levels alone needs no join:
    # the join per vector took 9 of a 12 ms exact search over 2,524 chunks), kept by triggers on both tables
    r"""
ALTER TABLE chunk_vectors ADD COLUMN level text;
-- (an HNSW index would take every rewritten row again: minutes per 100k vectors under the migration's lock;
-- dropped here, it is built again once a writer stores vectors past the threshold: store.py _maybe_build_ann)
DO $d$ DECLARE r record; BEGIN
  FOR r IN SELECT i.indexrelid::regclass::text AS name FROM pg_index i
      WHERE i.indrelid = 'chunk_vectors'::regclass AND i.indexrelid::regclass::text LIKE 'chunks_hnsw_%' LOOP
    EXECUTE 'DROP INDEX ' || quote_ident(r.name);
  END LOOP;
END $d$;
UPDATE chunk_vectors v SET level = lower(btrim(coalesce(c.visibility, 'public'))) FROM chunks c WHERE c.id = v.chunk_id;
CREATE FUNCTION saipling_vector_level() RETURNS trigger LANGUAGE plpgsql AS $t$
BEGIN
  SELECT lower(btrim(coalesce(c.visibility, 'public'))) INTO NEW.level FROM chunks c WHERE c.id = NEW.chunk_id;
  RETURN NEW;
END $t$;
CREATE TRIGGER chunk_vectors_level BEFORE INSERT OR UPDATE OF chunk_id ON chunk_vectors
  FOR EACH ROW EXECUTE FUNCTION saipling_vector_level();
CREATE FUNCTION saipling_chunk_level() RETURNS trigger LANGUAGE plpgsql AS $t$
BEGIN
  UPDATE chunk_vectors SET level = lower(btrim(coalesce(NEW.visibility, 'public'))) WHERE chunk_id = NEW.id;
  RETURN NULL;
END $t$;
CREATE TRIGGER chunks_level AFTER UPDATE OF visibility ON chunks
  FOR EACH ROW WHEN (OLD.visibility IS DISTINCT FROM NEW.visibility) EXECUTE FUNCTION saipling_chunk_level();
""",
    # 3: CJK runs as overlapping character pairs in the keywords (markdown.terms.cjk_bigrams; the runs are
    # markdown.terms.CJK_RUN_RE, the first class the quick test CJK_RE), chunks and files indexed before included
    r"""
CREATE FUNCTION saipling_cjk(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $f$
DECLARE run text; runs text[] := '{}'; grams text[]; i int;
BEGIN
  IF t IS NULL OR t !~ '[\u2e80-\u9fff\uac00-\ud7ff\uf900-\ufaff\U00020000-\U0003134f]' THEN RETURN ''; END IF;
  FOR run IN SELECT m[1] FROM regexp_matches(t, '((?:(?=\w)[\u3005-\u3007\u303b\u3040-\u30ff\u3100-\u312f'
      '\u3131-\u318f\u31a0-\u31ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff'
      '\U00020000-\U0003134f])+)', 'g') AS m LOOP
    grams := '{}';
    FOR i IN 1 .. char_length(run) - 1 LOOP grams := grams || substr(run, i, 2); END LOOP;
    runs := runs || array_to_string(grams || right(run, 1), ' ');
  END LOOP;
  RETURN array_to_string(runs, E'\n');
END $f$;
CREATE OR REPLACE FUNCTION saipling_chunk_keywords() RETURNS trigger LANGUAGE plpgsql AS $t$
DECLARE folded text;
BEGIN
  folded := saipling_fold(concat_ws(' ', NEW.text, NEW.heading_path, NEW.ident_words,
    saipling_cjk(concat_ws(E'\n', NEW.heading_path, NEW.text))));
  NEW.tsv := to_tsvector('saipling', folded);
  NEW.doclen := coalesce(array_length(regexp_split_to_array(btrim(folded), ' +'), 1), 0);
  RETURN NEW;
END $t$;
UPDATE chunks SET text = text WHERE saipling_cjk(concat_ws(E'\n', heading_path, text)) <> '';
UPDATE files f SET tsv = f.tsv || to_tsvector('saipling', saipling_fold(x.cjk)),
  doclen = f.doclen + coalesce(array_length(regexp_split_to_array(btrim(saipling_fold(x.cjk)), ' +'), 1), 0)
  FROM (SELECT c.ws, c.path, string_agg(saipling_cjk(concat_ws(E'\n', c.heading_path, c.text)), E'\n') AS cjk
        FROM chunks c GROUP BY c.ws, c.path) x
  WHERE x.ws = f.ws AND x.path = f.path AND btrim(saipling_fold(x.cjk)) <> '';
""",
    # 4: postings (the lexemes of each chunk's and file's tsvector as rows, kept by triggers), so a keyword search
    # reads its terms' rows only (keywords.py); existing chunks and files are posted here (no re-embedding)
    r"""
-- (no foreign key on ws: its check per posting row more than doubled a write's cost; the triggers below, and one
-- on workspaces, remove a deleted chunk's, file's or workspace's postings)
CREATE TABLE chunk_terms(
  ws int NOT NULL, lexeme text NOT NULL, chunk_id bigint NOT NULL,
  tf int NOT NULL, doclen int NOT NULL, level text NOT NULL,
  PRIMARY KEY (ws, lexeme, chunk_id) INCLUDE (tf, doclen, level));
CREATE TABLE file_terms(
  ws int NOT NULL, lexeme text NOT NULL, file_id bigint NOT NULL,
  tf int NOT NULL, doclen int NOT NULL,
  PRIMARY KEY (ws, lexeme, file_id) INCLUDE (tf, doclen));
-- a posting's term frequency: its positions (as saipling_tf reads them), 1 in a tsvector stored without them
CREATE FUNCTION saipling_chunk_terms_added() RETURNS trigger LANGUAGE plpgsql AS $t$
BEGIN
  INSERT INTO chunk_terms(ws, lexeme, chunk_id, tf, doclen, level)
    SELECT n.ws, u.lexeme, n.id, coalesce(array_length(u.positions, 1), 1), n.doclen,
      lower(btrim(coalesce(n.visibility, 'public')))
    FROM added n CROSS JOIN LATERAL unnest(n.tsv) u;
  RETURN NULL;
END $t$;
CREATE FUNCTION saipling_chunk_terms_removed() RETURNS trigger LANGUAGE plpgsql AS $t$
BEGIN
  DELETE FROM chunk_terms t USING (SELECT o.ws, o.id, unnest(tsvector_to_array(o.tsv)) AS lexeme FROM removed o) g
    WHERE t.ws = g.ws AND t.lexeme = g.lexeme AND t.chunk_id = g.id;
  RETURN NULL;
END $t$;
-- (an update of a chunk's index or line numbers leaves its postings: only a new tsvector, length or level changes them)
CREATE FUNCTION saipling_chunk_terms_changed() RETURNS trigger LANGUAGE plpgsql AS $t$
DECLARE changed bigint[];
BEGIN
  SELECT array_agg(n.id) INTO changed FROM removed o JOIN added n ON n.id = o.id
    WHERE o.tsv IS DISTINCT FROM n.tsv OR o.doclen <> n.doclen OR o.ws <> n.ws
      OR o.visibility IS DISTINCT FROM n.visibility;
  IF changed IS NULL THEN RETURN NULL; END IF;
  DELETE FROM chunk_terms t USING (SELECT o.ws, o.id, unnest(tsvector_to_array(o.tsv)) AS lexeme FROM removed o
      WHERE o.id = ANY(changed)) g
    WHERE t.ws = g.ws AND t.lexeme = g.lexeme AND t.chunk_id = g.id;
  INSERT INTO chunk_terms(ws, lexeme, chunk_id, tf, doclen, level)
    SELECT n.ws, u.lexeme, n.id, coalesce(array_length(u.positions, 1), 1), n.doclen,
      lower(btrim(coalesce(n.visibility, 'public')))
    FROM added n CROSS JOIN LATERAL unnest(n.tsv) u WHERE n.id = ANY(changed);
  RETURN NULL;
END $t$;
CREATE TRIGGER chunks_terms_added AFTER INSERT ON chunks REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION saipling_chunk_terms_added();
CREATE TRIGGER chunks_terms_removed AFTER DELETE ON chunks REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION saipling_chunk_terms_removed();
CREATE TRIGGER chunks_terms_changed AFTER UPDATE ON chunks REFERENCING OLD TABLE AS removed NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION saipling_chunk_terms_changed();

CREATE FUNCTION saipling_file_terms_added() RETURNS trigger LANGUAGE plpgsql AS $t$
BEGIN
  INSERT INTO file_terms(ws, lexeme, file_id, tf, doclen)
    SELECT n.ws, u.lexeme, n.id, coalesce(array_length(u.positions, 1), 1), n.doclen
    FROM added n CROSS JOIN LATERAL unnest(n.tsv) u;
  RETURN NULL;
END $t$;
CREATE FUNCTION saipling_file_terms_removed() RETURNS trigger LANGUAGE plpgsql AS $t$
BEGIN
  DELETE FROM file_terms t USING (SELECT o.ws, o.id, unnest(tsvector_to_array(o.tsv)) AS lexeme FROM removed o) g
    WHERE t.ws = g.ws AND t.lexeme = g.lexeme AND t.file_id = g.id;
  RETURN NULL;
END $t$;
CREATE FUNCTION saipling_file_terms_changed() RETURNS trigger LANGUAGE plpgsql AS $t$
DECLARE changed bigint[];
BEGIN
  SELECT array_agg(n.id) INTO changed FROM removed o JOIN added n ON n.id = o.id
    WHERE o.tsv IS DISTINCT FROM n.tsv OR o.doclen <> n.doclen OR o.ws <> n.ws;
  IF changed IS NULL THEN RETURN NULL; END IF;
  DELETE FROM file_terms t USING (SELECT o.ws, o.id, unnest(tsvector_to_array(o.tsv)) AS lexeme FROM removed o
      WHERE o.id = ANY(changed)) g
    WHERE t.ws = g.ws AND t.lexeme = g.lexeme AND t.file_id = g.id;
  INSERT INTO file_terms(ws, lexeme, file_id, tf, doclen)
    SELECT n.ws, u.lexeme, n.id, coalesce(array_length(u.positions, 1), 1), n.doclen
    FROM added n CROSS JOIN LATERAL unnest(n.tsv) u WHERE n.id = ANY(changed);
  RETURN NULL;
END $t$;
CREATE TRIGGER files_terms_added AFTER INSERT ON files REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION saipling_file_terms_added();
CREATE TRIGGER files_terms_removed AFTER DELETE ON files REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION saipling_file_terms_removed();
CREATE TRIGGER files_terms_changed AFTER UPDATE ON files REFERENCING OLD TABLE AS removed NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION saipling_file_terms_changed();

CREATE FUNCTION saipling_workspace_terms_removed() RETURNS trigger LANGUAGE plpgsql AS $t$
BEGIN
  DELETE FROM chunk_terms WHERE ws = OLD.id;
  DELETE FROM file_terms WHERE ws = OLD.id;
  RETURN NULL;
END $t$;
CREATE TRIGGER workspaces_terms_removed AFTER DELETE ON workspaces
  FOR EACH ROW EXECUTE FUNCTION saipling_workspace_terms_removed();

INSERT INTO chunk_terms(ws, lexeme, chunk_id, tf, doclen, level)
  SELECT c.ws, u.lexeme, c.id, coalesce(array_length(u.positions, 1), 1), c.doclen,
    lower(btrim(coalesce(c.visibility, 'public')))
  FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) u;
INSERT INTO file_terms(ws, lexeme, file_id, tf, doclen)
  SELECT f.ws, u.lexeme, f.id, coalesce(array_length(u.positions, 1), 1), f.doclen
  FROM files f CROSS JOIN LATERAL unnest(f.tsv) u;
""",
    # 5: which copy of the project last wrote each file (host and folder: storage.base.FileState.changed_here), so
    # several copies sharing a workspace keep each other's edits and new files
    """
ALTER TABLE files ADD COLUMN IF NOT EXISTS origin text;
""",
]

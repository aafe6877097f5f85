-- A key's row is inserted when the key is claimed and updated twice within about a
-- second (its payment named, its answer stored). Neither update changes an indexed
-- column, so each could be a heap-only update (no new entry in either index) if the
-- row's page had room. At the default fill every page is full when its last row goes
-- in: nine updates in ten went to another page and wrote both indexes again. Pages now
-- leave half their room for the updates of their own rows. It applies to pages written
-- from now on; a table with history takes it fully once rewritten (VACUUM FULL, or
-- pg_repack online).
ALTER TABLE idempotency_keys SET (fillfactor = 50);

-- The stock counter of the claim alternatives (order service's CLAIM_STRATEGY other
-- than the default), measured against the default claim by the benchmark: one row per
-- product holding how many units may still be claimed through it, and a version for
-- the optimistic alternatives. The default claim never reads or writes it. A row is
-- made from the product's AVAILABLE units by the first alternative claim of the
-- product in a process; units that come back later are not counted back, so the
-- counter can only fall short of the units on sale, never exceed them.

CREATE TABLE claim_counters (
    product_id  BIGINT CONSTRAINT claim_counters_pkey PRIMARY KEY
                       CONSTRAINT claim_counters_product_fk REFERENCES products (id),
    available   BIGINT NOT NULL,
    version     BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT claim_counters_available_nonnegative CHECK (available >= 0)
);

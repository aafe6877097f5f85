-- A pass whose holder's account could not hold the price took no unit. The gate is told
-- it is used (POST /v1/passes/used), so its quota stops counting it in flight and the
-- unit it stood for goes to a buyer who can pay, instead of waiting for the pass to
-- expire. Its holder may still use it once topped up.
CREATE TABLE unfunded_passes (
    pass_id    UUID        CONSTRAINT unfunded_passes_pkey PRIMARY KEY,
    product_id BIGINT      NOT NULL CONSTRAINT unfunded_passes_product_fk REFERENCES products (id),
    member_id  TEXT        NOT NULL,
    refused_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

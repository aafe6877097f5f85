-- Products and one row per sellable unit. A unit's state is the authority on stock:
-- AVAILABLE units can be claimed, RESERVED ones are held by a live reservation,
-- SOLD ones belong to a confirmed order.
CREATE TABLE products (
    id          BIGINT GENERATED ALWAYS AS IDENTITY CONSTRAINT products_pkey PRIMARY KEY,
    name        TEXT        NOT NULL,
    price       BIGINT      NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT products_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT products_price_positive CHECK (price > 0)
);

CREATE TABLE product_stock (
    id          BIGINT GENERATED ALWAYS AS IDENTITY CONSTRAINT product_stock_pkey PRIMARY KEY,
    product_id  BIGINT      NOT NULL CONSTRAINT product_stock_product_fk REFERENCES products (id),
    state       TEXT        NOT NULL DEFAULT 'AVAILABLE',
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT product_stock_state_valid CHECK (state IN ('AVAILABLE', 'RESERVED', 'SOLD'))
);

-- The claim reads only this index: it holds AVAILABLE units alone, so finding one does
-- not get slower as sold units pile up or as stock grows.
CREATE INDEX product_stock_available_idx ON product_stock (product_id, id) WHERE state = 'AVAILABLE';
-- Counts per state for the product views (and the foreign key's index).
CREATE INDEX product_stock_product_state_idx ON product_stock (product_id, state);

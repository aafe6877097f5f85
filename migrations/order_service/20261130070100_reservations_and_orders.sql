-- A reservation holds one unit for one member until expires_at; exactly one of
-- confirm, cancel and expiry ends it. An order is written when it is confirmed.
CREATE TABLE reservations (
    id          UUID        CONSTRAINT reservations_pkey PRIMARY KEY,
    product_id  BIGINT      NOT NULL CONSTRAINT reservations_product_fk REFERENCES products (id),
    unit_id     BIGINT      NOT NULL CONSTRAINT reservations_unit_fk REFERENCES product_stock (id),
    member_id   TEXT        NOT NULL,
    pass_id     UUID        NOT NULL,
    price       BIGINT      NOT NULL,
    state       TEXT        NOT NULL DEFAULT 'RESERVED',
    expires_at  TIMESTAMPTZ NOT NULL,
    order_id    UUID,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT reservations_pass_id_unique UNIQUE (pass_id),
    CONSTRAINT reservations_state_valid CHECK (state IN ('RESERVED', 'CONFIRMED', 'CANCELLED', 'EXPIRED')),
    CONSTRAINT reservations_confirmed_has_order CHECK (state <> 'CONFIRMED' OR order_id IS NOT NULL),
    CONSTRAINT reservations_price_positive CHECK (price > 0)
);

-- No unit is ever held by two live reservations, whatever the code above does.
CREATE UNIQUE INDEX reservations_live_unit_unique ON reservations (unit_id)
    WHERE state IN ('RESERVED', 'CONFIRMED');
-- The expiry sweep walks only live reservations, oldest deadline first.
CREATE INDEX reservations_expiry_idx ON reservations (expires_at) WHERE state = 'RESERVED';
CREATE INDEX reservations_member_idx ON reservations (member_id, created_at);

CREATE TABLE orders (
    id              UUID        CONSTRAINT orders_pkey PRIMARY KEY,
    reservation_id  UUID        NOT NULL CONSTRAINT orders_reservation_fk REFERENCES reservations (id),
    product_id      BIGINT      NOT NULL CONSTRAINT orders_product_fk REFERENCES products (id),
    unit_id         BIGINT      NOT NULL CONSTRAINT orders_unit_fk REFERENCES product_stock (id),
    member_id       TEXT        NOT NULL,
    price           BIGINT      NOT NULL,
    state           TEXT        NOT NULL DEFAULT 'CONFIRMED',
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT orders_reservation_unique UNIQUE (reservation_id),
    CONSTRAINT orders_state_valid CHECK (state IN ('CONFIRMED', 'CANCELLED'))
);

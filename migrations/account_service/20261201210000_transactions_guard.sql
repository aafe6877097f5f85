-- The columns account_app may update on a ledger row move one way only: a row goes
-- from APPLIED to DECLINED (never back), leaves the merchant only as it is declined
-- (a credit is pointed at the shard its refunded debit paid into), and its refunded
-- amount only grows. The grants keep every other column fixed; this
-- keeps the three from being rewritten either. Owned by the migrator, so the running
-- service cannot drop it.
CREATE FUNCTION transactions_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status
       AND NOT (OLD.status = 'APPLIED' AND NEW.status = 'DECLINED') THEN
        RAISE EXCEPTION 'ledger row %: status % cannot become %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.merchant_shard IS DISTINCT FROM OLD.merchant_shard
       AND NOT (NEW.merchant_shard IS NULL AND NEW.status = 'DECLINED')
       AND OLD.kind <> 'CREDIT' THEN
        RAISE EXCEPTION 'ledger row %: merchant shard cannot be changed', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.refunded < OLD.refunded THEN
        RAISE EXCEPTION 'ledger row %: refunded cannot decrease', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER transactions_guard
    BEFORE UPDATE ON transactions
    FOR EACH ROW EXECUTE FUNCTION transactions_guard();

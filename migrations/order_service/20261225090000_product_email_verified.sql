-- A product's second eligibility rule. email_verified_required: only members whose
-- buyer token says their email is verified may take a pass or join the waitlist.
ALTER TABLE products ADD COLUMN email_verified_required BOOLEAN NOT NULL DEFAULT false;

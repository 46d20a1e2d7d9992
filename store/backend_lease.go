package store

import (
	"fmt"
	"time"
)

// checkLease validates a lease holder and end.
func checkLease(holder string, until time.Time) error {
	switch {
	case holder == "":
		return invalid("empty lease holder")
	case len(holder) > MaxHolderBytes:
		return invalid("lease holder is %d bytes, limit %d", len(holder), MaxHolderBytes)
	case until.IsZero():
		return invalid("lease holder %q without LeaseUntil", holder)
	case !ValidTime(until):
		return invalid("LeaseUntil %v out of range", until)
	}
	return nil
}

// CheckClaim validates the arguments of Store.Claim: a non-empty holder of
// at most MaxHolderBytes, and now and until representable with until after
// now. It fails with ErrInvalid. Backends call it before anything else.
func CheckClaim(holder string, now, until time.Time) error {
	if err := checkLease(holder, until); err != nil {
		return err
	}
	if now.IsZero() || !ValidTime(now) {
		return invalid("claim time %v out of range", now)
	}
	if !until.After(now) {
		return invalid("lease until %v is not after now %v", until, now)
	}
	return nil
}

// ApplyClaim takes the lease of t for holder (see Store.Claim), in place:
// it fails with ErrTerminal when t ended and with ErrLeased when another
// holder's lease is valid at now (LeaseUntil after now), leaving t as it
// was. Otherwise it sets LeaseHolder and LeaseUntil (UTC), increments
// LeaseEpoch and Version, and leaves UpdatedAt. Call CheckClaim first.
func ApplyClaim(t *Task, holder string, now, until time.Time) (Changes, error) {
	ch := changesOf(t)
	if t.Status.Terminal() {
		return ch, fmt.Errorf("%w: task %s is %s", ErrTerminal, t.ID, t.Status)
	}
	if t.LeaseHolder != "" && t.LeaseHolder != holder && t.LeaseUntil.After(now) {
		return ch, fmt.Errorf("%w: task %s is leased by %q until %v", ErrLeased, t.ID, t.LeaseHolder, t.LeaseUntil)
	}
	t.LeaseHolder = holder
	t.LeaseUntil = until.UTC()
	t.LeaseEpoch++
	t.Version++
	ch.LeaseChanged = true
	return ch, nil
}

// CheckRenew validates the arguments of Store.Renew (ErrInvalid).
func CheckRenew(holder string, until time.Time) error {
	return checkLease(holder, until)
}

// ApplyRenew extends t's lease to until (UTC) when holder holds it and
// reports whether it did. Version and UpdatedAt are left alone. A terminal
// task has no holder, so it is never renewed.
func ApplyRenew(t *Task, holder string, until time.Time) (Changes, bool) {
	ch := changesOf(t)
	if t.LeaseHolder != holder || holder == "" || t.Status.Terminal() {
		return ch, false
	}
	t.LeaseUntil = until.UTC()
	ch.LeaseChanged = true
	return ch, true
}

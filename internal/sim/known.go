package sim

// Known lists the invariants that fail on today's engine for a reason
// already named: the simulation's test reports their failures (with the
// reason, in its log) instead of failing on them. It is empty: every
// invariant holds, and every violation fails the test. An entry is for a
// bug found and named whose fix is on its way, never for one left alone;
// testdata/found-plans.tsv keeps the plan that showed each bug found so
// far (TestFoundPlans replays them).
var Known = map[string]string{}

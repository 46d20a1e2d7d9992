package postgres

// NotifierCounts returns how many changes s's notifier has sent and in how
// many round trips.
func NotifierCounts(s *Store) (records, roundTrips uint64) {
	return s.pub.records.Load(), s.pub.roundTrips.Load()
}

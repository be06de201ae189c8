package election

// handOvers are the slots of the resigns under way in one Elector (Config.MaxHandOvers): a stop
// resigns every held term in one round, as many at once as there are slots, and each resign keeps
// its slot from OnResign to the delete of its key, so that the key goes right after the leader's
// hand-over and the next resign starts as soon as a slot is free. Nothing in it is serial in the
// number of queues.
type handOvers chan struct{}

// take waits for a free slot and returns true, or returns false, holding none, once done is closed
// first (the term ended on its own meanwhile: nothing is left to hand over).
func (h handOvers) take(done <-chan struct{}) bool {
	select {
	case h <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// give frees a slot that take returned.
func (h handOvers) give() { <-h }

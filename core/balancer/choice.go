package balancer

// Choice is what one pick sees of its request. A nil *Choice is a plain pick.
type Choice struct {
	// Exclude holds the IDs of backends the request must not go to (already tried and failed,
	// or refused by a stage); they are skipped like down backends.
	Exclude Set
	// IgnoreEjection lets a pick take backends that passive health ejected (not those marked
	// down nor excluded ones, nor under StrictRefusals those refusing for a Retry-After): the
	// panic mode used when every backend is ejected, since a guess at a recovering server
	// beats refusing every request.
	IgnoreEjection bool
	// StrictRefusals keeps backends refusing for a Retry-After out even in panic mode: set
	// for a route that answers for them (a model route), which has no use for a server that
	// would only refuse again. Elsewhere a refusal counts as an ejection.
	StrictRefusals bool
}

// Reset empties c for the next request, keeping its capacity.
func (c *Choice) Reset() {
	c.Exclude.Reset()
	c.IgnoreEjection = false
	c.StrictRefusals = false
}

// CopyFrom makes c a copy of src, reusing c's storage (no allocation once c has held as many
// IDs as src).
func (c *Choice) CopyFrom(src *Choice) {
	c.Exclude.lo = src.Exclude.lo
	c.Exclude.more = append(c.Exclude.more[:0], src.Exclude.more...)
	c.IgnoreEjection = src.IgnoreEjection
	c.StrictRefusals = src.StrictRefusals
}

// eligible reports whether b may be picked under c: up, not excluded, and neither ejected nor
// refusing for a Retry-After (in panic mode either may be picked, but a refusing backend only
// without StrictRefusals).
func (c *Choice) eligible(b *Backend) bool {
	if b.down.Load() || c != nil && c.Exclude.Has(b.ID) {
		return false
	}
	refusing := b.refusingNow()
	if c != nil && c.IgnoreEjection {
		return !refusing || !c.StrictRefusals
	}
	return !refusing && !b.Ejected()
}

// Set is a set of backend IDs (small non-negative integers). The zero value is empty; IDs
// below 64 need no allocation, larger ones grow a slice that Reset keeps.
type Set struct {
	lo   uint64
	more []uint64 // bits for IDs 64 and up
}

// Add puts id in s; a negative id is ignored.
func (s *Set) Add(id int) {
	switch {
	case id < 0:
	case id < 64:
		s.lo |= 1 << uint(id)
	default:
		w := id/64 - 1
		for len(s.more) <= w {
			s.more = append(s.more, 0)
		}
		s.more[w] |= 1 << uint(id%64)
	}
}

// Has reports whether id is in s.
func (s *Set) Has(id int) bool {
	switch {
	case id < 0:
		return false
	case id < 64:
		return s.lo&(1<<uint(id)) != 0
	default:
		w := id/64 - 1
		return w < len(s.more) && s.more[w]&(1<<uint(id%64)) != 0
	}
}

// Len returns the number of IDs in s.
func (s *Set) Len() int {
	n := popcount(s.lo)
	for _, w := range s.more {
		n += popcount(w)
	}
	return n
}

// Reset empties s, keeping its capacity.
func (s *Set) Reset() {
	s.lo = 0
	clear(s.more)
	s.more = s.more[:0]
}

func popcount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

package router

// blockTable remembers, for recently routed prompt blocks, which session
// last routed a prompt through each one, so that a new session can tell
// how much of its first prompt it shares with prompts of other sessions: a
// common system prompt, a shared document. That depth is where the
// session's own content starts (session.forkDepth), and a continuation
// whose prompt leaves out the end of the session's previous prompt must
// still reach beyond it (see prefixIndex). The session that last went
// through the deepest shared block is the one a new session may branch
// off (see Conversation.branch).
//
// It is a fixed array of slots addressed by block hash, each holding one
// hash and one session: a newer block overwrites an older one in its slot,
// so memory is constant and old blocks fade out. Blocks that many prompts
// share, the ones that matter here, are written again by each of them and
// stay. Not goroutine-safe.
type blockTable struct {
	slots []blockSlot
	mask  uint64
}

type blockSlot struct {
	hash    uint64
	session uint64 // session.id; 0: empty
}

// blockTableSlots sizes the table for a session table of maxSessions: 64
// slots a session, a power of two from 2^10 to 2^18 (4 MiB, the size at the
// default max_sessions). At a few thousand new blocks a second a block
// lasts minutes before another takes its slot; a block every prompt shares
// is rewritten by each of them.
func blockTableSlots(maxSessions int) int {
	slots := 1 << 10
	for slots < 1<<18 && slots < maxSessions*64 {
		slots <<= 1
	}
	return slots
}

// newBlockTable returns an empty table; slots must be a power of two.
func newBlockTable(slots int) *blockTable {
	return &blockTable{slots: make([]blockSlot, slots), mask: uint64(slots - 1)}
}

// sharedDepth returns how many leading blocks of a prompt with these
// chained hashes some session other than self routed a prompt through (0:
// none). Hashes are chained, so a shared block implies that every block
// before it is shared: a binary search finds the deepest in a few probes.
// (A block whose slot was taken since reads as not shared; the search then
// returns a shallower depth, or a deeper one past it.)
func (t *blockTable) sharedDepth(hashes []uint64, self uint64) int {
	lo, hi := 0, len(hashes) // blocks [0, lo) are shared as far as the search knows; [hi, len) are not
	for lo < hi {
		mid := lo + (hi-lo+1)/2 // depth mid: block hashes[mid-1]
		if t.sharedBy(hashes[mid-1], self) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// sharedBy reports whether a session other than self routed a prompt
// through the block with hash h.
func (t *blockTable) sharedBy(h, self uint64) bool {
	s := t.slots[h&t.mask]
	return s.hash == h && s.session != 0 && s.session != self
}

// record notes that session self routed a prompt through these blocks.
func (t *blockTable) record(hashes []uint64, self uint64) {
	for _, h := range hashes {
		t.slots[h&t.mask] = blockSlot{hash: h, session: self}
	}
}

// writer returns the session that last routed a prompt through the block
// at depth (1-based) of these chained hashes, 0 when the table does not
// know it.
func (t *blockTable) writer(hashes []uint64, depth int) uint64 {
	if depth <= 0 || depth > len(hashes) {
		return 0
	}
	h := hashes[depth-1]
	if s := t.slots[h&t.mask]; s.hash == h {
		return s.session
	}
	return 0
}

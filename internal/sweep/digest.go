package sweep

import (
	"context"
	"fmt"

	"github.com/owedhq/owed/internal/ledger"
)

// folded is what foldDigests made of a chunk: for the row that carries a
// digest's message (its lead, the first member in the lease's order), the
// digest's id and every member of it the chunk leased.
type folded struct {
	digest  map[int64]int64
	members map[int64][]int64
}

// rows is what the message of row id stands for: the members of its
// digest when it leads one, else the row alone.
func (f folded) rows(id int64) []int64 {
	if m, ok := f.members[id]; ok {
		return m
	}
	return []int64{id}
}

// foldDigests leaves one row per digest in a chunk, in the lease's order:
// a digest is one message and one send (ledger.ClaimDigest claims all its
// members), so the members behind its lead are published with it and
// marked queued or handed back with it. A digest whose members two chunks
// or two slices leased is two messages; the worker that claims first takes
// every member, and the other finds them held or settled.
func (s *Sweeper) foldDigests(ctx context.Context, chunk []ledger.Leased) ([]ledger.Leased, folded, error) {
	f := folded{}
	of, err := s.ledger.DigestsOf(ctx, ids(chunk))
	if err != nil {
		return nil, f, fmt.Errorf("read the leased rows' digests: %w", err)
	}
	if len(of) == 0 {
		return chunk, f, nil
	}
	type group struct {
		tenant string
		digest int64
		due    int64
	}
	lead := map[group]int64{}
	f.digest, f.members = map[int64]int64{}, map[int64][]int64{}
	out := chunk[:0:0]
	for _, r := range chunk {
		d, ok := of[r.ID]
		if !ok {
			out = append(out, r)
			continue
		}
		g := group{r.Tenant, d, r.DueAt.UnixMicro()}
		if l, ok := lead[g]; ok {
			f.members[l] = append(f.members[l], r.ID)
			continue
		}
		lead[g] = r.ID
		f.digest[r.ID], f.members[r.ID] = d, []int64{r.ID}
		out = append(out, r)
	}
	return out, f, nil
}

package oplog

import (
	"fmt"
	"sync"
	"testing"
)

// TestIntern: interned namespaces equal their bytes, whatever the table
// held before (more names than slots, so slots are taken over), with
// parsers running side by side.
func TestIntern(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				b := []byte(fmt.Sprintf("db%d.coll%d", g, i%(len(nsTable)*2)))
				if s := intern(b); s != string(b) {
					t.Errorf("intern(%q) = %q", b, s)
					return
				}
			}
		})
	}
	wg.Wait()
}

package docfilter

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TableCase is a case of the evaluation table as the FerretDB test reads
// it. That test lives in package docfilter_test: the test servers'
// package imports pkg/config, which imports this package.
type TableCase struct {
	Query                     string
	Filter                    bson.Raw
	Docs                      []bson.Raw
	Want                      string
	Unstorable, FerretDeparts string
}

// TableCases returns the whole evaluation table.
func TableCases(t testing.TB) []TableCase {
	var out []TableCase
	for _, c := range allCases() {
		out = append(out, TableCase{Query: c.query, Filter: extJSON(t, c.query), Docs: caseDocs(t, c), Want: c.want,
			Unstorable: c.unstorable, FerretDeparts: c.ferretDeparts})
	}
	return out
}

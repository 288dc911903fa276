// Package flags holds what ferry's commands share about their flags: the
// names of the flags that set workload options, so that an option error
// names the flag the user typed.
package flags

import (
	"errors"
	"strings"

	"github.com/mongoferry/mongoferry/pkg/workload"
)

// workloadNames maps workload.Options fields to the flags that set them.
var workloadNames = []string{
	"Database", "--db",
	"Collection", "--collection",
	"RecordCount", "--recordcount",
	"FieldCount", "--fieldcount",
	"FieldLength", "--fieldlength",
	"KeyType", "--key-type",
	"Workload", "--workload",
	"Distribution", "--distribution",
	"ReadProportion", "--read-proportion",
	"UpdateProportion", "--update-proportion",
	"InsertProportion", "--insert-proportion",
	"DeleteProportion", "--delete-proportion",
	"Threads", "--threads",
	"Operations", "--operations",
	"Duration", "--duration",
	"BatchSize", "--batch-size",
	"Rate", "--rate",
}

// WorkloadError rewrites a workload option error to name flags instead of
// workload.Options fields; other errors are returned as they are.
func WorkloadError(err error) error {
	var oe *workload.OptionError
	if !errors.As(err, &oe) {
		return err
	}
	return errors.New(strings.NewReplacer(workloadNames...).Replace(oe.Error()))
}

package controller

import (
	"strings"

	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// taskFileFields maps the task-file fields the engine's messages name to
// the SyncTask fields a user sets instead: the controller writes the task
// file from the SyncTask, so "check source.tls.caFile" asks a SyncTask user
// to change a field they never wrote. The longer phrases come first (a
// strings.Replacer tries its pairs in order at each position), and a
// field already in SyncTask terms is left as it is.
var taskFileFields = strings.NewReplacer(termPairs()...)

func termPairs() []string {
	var pairs []string
	for _, role := range []string{"source", "target"} {
		spec := "spec." + role
		pairs = append(pairs,
			spec+".", spec+".",
			role+".tls.certificateFile with "+role+".tls.privateKeyFile", spec+".tls.certificateSecret",
			role+".tls.certificateFile and "+role+".tls.privateKeyFile", spec+".tls.certificateSecret",
			role+".tls.caFile", spec+".tls.caSecret",
			role+".tls.certificateKeyFile", spec+".tls.certificateKeySecret",
			role+".tls.certificateFile", spec+".tls.certificateSecret",
			role+".tls.privateKeyFile", spec+".tls.certificateSecret",
			role+".username and the password (Secret, passwordFile or passwordEnv)", "the username and password in "+spec+".credentialsSecret",
			role+".passwordFile", spec+".credentialsSecret",
			role+".passwordEnv", spec+".credentialsSecret",
			role+".username", spec+".credentialsSecret",
			role+".authSource", spec+".authSource",
			role+".uri", spec+".uri",
		)
	}
	return pairs
}

// specTerms rewrites a worker's (or the engine's) message in the
// SyncTask's fields.
func specTerms(msg string) string { return taskFileFields.Replace(msg) }

// reportInSpecTerms rewrites the messages of a worker's /status in place.
func reportInSpecTerms(s *workerapi.Status) {
	s.Error = specTerms(s.Error)
	for i := range s.Shards {
		s.Shards[i].Error = specTerms(s.Shards[i].Error)
	}
	if s.Cutover != nil {
		s.Cutover.Message = specTerms(s.Cutover.Message)
	}
	if s.Topology != nil {
		s.Topology.Error = specTerms(s.Topology.Error)
	}
}

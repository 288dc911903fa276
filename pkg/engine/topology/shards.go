package topology

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// ErrNoShards means a sharded source lists no shard to read.
var ErrNoShards = errors.New("the sharded source lists no shards")

// Shard is one shard of a sharded source, as config.shards describes it,
// with the address the task reaches it at.
type Shard struct {
	// Name is the shard's _id in config.shards.
	Name string `json:"name"`
	// Host is config.shards' host string, "rsName/h1:p,h2:p".
	Host string `json:"host,omitempty"`
	// ReplicaSet is the shard's replica set name (before the slash).
	ReplicaSet string `json:"replicaSet,omitempty"`
	// URI reaches the shard's replica set: the source.shards[] override
	// when there is one, otherwise built from Host. It holds no
	// credentials (they come from the task's source endpoint).
	URI string `json:"uri"`
	// Overridden is true when URI comes from source.shards[].
	Overridden bool `json:"overridden,omitempty"`
	// Draining is true while the shard is being removed.
	Draining bool `json:"draining,omitempty"`
}

// configShard is one config.shards document.
type configShard struct {
	ID       string `bson:"_id"`
	Host     string `bson:"host"`
	State    int64  `bson:"state"`
	Draining bool   `bson:"draining"`
}

// ParseShards reads config.shards documents and applies the address
// overrides of source.shards[]. An override for a shard config.shards does
// not list is kept aside for when the shard is added (it is not an error:
// the list changes while a task runs). The result is sorted by name.
func ParseShards(docs []bson.Raw, overrides []config.Shard) ([]Shard, error) {
	byName := map[string]string{}
	for _, o := range overrides {
		byName[o.Name] = o.URI
	}
	out := make([]Shard, 0, len(docs))
	for _, raw := range docs {
		var d configShard
		if err := bson.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("config.shards: unreadable document %s: %w", raw, err)
		}
		if d.ID == "" {
			return nil, fmt.Errorf("config.shards: document without _id: %s", raw)
		}
		s := Shard{Name: d.ID, Host: d.Host, Draining: d.Draining}
		if uri, ok := byName[d.ID]; ok {
			s.URI, s.Overridden = uri, true
			if rs, _, ok := strings.Cut(d.Host, "/"); ok {
				s.ReplicaSet = rs
			}
		} else {
			rs, uri, err := hostURI(d.Host)
			if err != nil {
				return nil, fmt.Errorf("config.shards: shard %s: %w; or give its address in source.shards[] (name: %s, uri: mongodb://host:port/)", d.ID, err, d.ID)
			}
			s.ReplicaSet, s.URI = rs, uri
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Shard) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// hostURI turns "rsName/h1:p,h2:p" (or a bare "h:p") into a URI for the
// shard's replica set.
func hostURI(host string) (rs, uri string, err error) {
	seeds := host
	if before, after, ok := strings.Cut(host, "/"); ok {
		rs, seeds = before, after
	}
	if strings.TrimSpace(seeds) == "" {
		return "", "", fmt.Errorf("host %q names no server", host)
	}
	for _, h := range strings.Split(seeds, ",") {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, "/@?") {
			return "", "", fmt.Errorf("host %q: %q is not host:port", host, h)
		}
	}
	u := "mongodb://" + seeds + "/"
	if rs != "" {
		u += "?replicaSet=" + url.QueryEscape(rs)
	} else {
		u += "?directConnection=true"
	}
	return rs, u, nil
}

// Endpoint returns the endpoint of one shard: the source endpoint's
// credentials and TLS with the shard's URI. URI query options of the
// source (authSource, tls, ...) are not carried over: give them in the
// shard's source.shards[] URI when the shard needs them.
func Endpoint(source config.Endpoint, s Shard) config.Endpoint {
	e := source
	e.URI, e.Kind, e.Shards = s.URI, config.KindReplicaSet, nil
	return e
}

// Diff compares two shard lists by name: added are in next only, removed
// in prev only.
func Diff(prev, next []Shard) (added, removed []Shard) {
	has := func(list []Shard, name string) bool {
		return slices.ContainsFunc(list, func(s Shard) bool { return s.Name == name })
	}
	for _, s := range next {
		if !has(prev, s.Name) {
			added = append(added, s)
		}
	}
	for _, s := range prev {
		if !has(next, s.Name) {
			removed = append(removed, s)
		}
	}
	return added, removed
}

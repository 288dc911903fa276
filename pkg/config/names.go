package config

import (
	"fmt"
	"strings"
)

// MongoDB's naming rules for databases and collections
// (https://www.mongodb.com/docs/manual/reference/limits/#naming-restrictions):
// checked on rename targets before anything connects, so that a bad name
// is refused with the rule that names it instead of the server's
// InvalidNamespace halfway through a copy.

// maxDatabaseName is the longest database name MongoDB accepts, in bytes.
const maxDatabaseName = 63

// maxNamespace is the longest db.collection MongoDB accepts, in bytes.
const maxNamespace = 255

// databaseNameChars are the characters MongoDB refuses in a database name
// (on every platform it runs on: Windows refuses more, `*<>:|?`).
const databaseNameChars = "/\\. \"$*<>:|?\x00"

// CheckDatabaseName says why name cannot be a MongoDB database name, or
// returns nil.
func CheckDatabaseName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a database name cannot be empty")
	case len(name) > maxDatabaseName:
		return fmt.Errorf("database name %q is %d bytes long; MongoDB allows at most %d", name, len(name), maxDatabaseName)
	}
	if i := strings.IndexAny(name, databaseNameChars); i >= 0 {
		return fmt.Errorf("database name %q contains %q, which MongoDB refuses in database names (any of / \\ . space \" $ * < > : | ? and NUL)", name, charAt(name, i))
	}
	return nil
}

// CheckCollectionName says why coll cannot be a MongoDB collection name in
// database db, or returns nil.
func CheckCollectionName(db, coll string) error {
	switch {
	case coll == "":
		return fmt.Errorf("a collection name cannot be empty")
	case strings.ContainsRune(coll, '$'):
		return fmt.Errorf("collection name %q contains \"$\", which MongoDB refuses in collection names", coll)
	case strings.ContainsRune(coll, 0):
		return fmt.Errorf("collection name %q contains a NUL character, which MongoDB refuses in collection names", coll)
	case strings.HasPrefix(coll, "system."):
		return fmt.Errorf("collection name %q starts with \"system.\", which MongoDB reserves for its own collections", coll)
	case strings.HasPrefix(coll, "."):
		return fmt.Errorf("collection name %q starts with \".\", which MongoDB refuses", coll)
	case len(db)+1+len(coll) > maxNamespace:
		return fmt.Errorf("namespace %s.%s is %d bytes long; MongoDB allows at most %d", db, coll, len(db)+1+len(coll), maxNamespace)
	}
	return nil
}

// charAt is the character of s at byte i, quoted by the caller.
func charAt(s string, i int) string {
	for j, r := range s {
		if j == i {
			return string(r)
		}
	}
	return s[i : i+1]
}

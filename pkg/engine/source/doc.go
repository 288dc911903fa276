// Package source reads the source deployment: Splitter cuts a collection
// into _id ranges per BSON type bracket (so mixed _id types are covered
// without gaps or overlaps), and Scanner reads one range into batches
// charged to the pipeline's byte budget.
package source

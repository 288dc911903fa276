// Package pipeline moves documents from readers to writers with bounded
// memory: Budget (a byte semaphore every buffered document is charged to),
// Batch (documents bound for one namespace) and Queues (bucketNum queues
// of bucketSize batches between readers and writers).
package pipeline

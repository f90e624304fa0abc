// Package guardmem gives tests slices that touch an inaccessible page at
// one end, so that assembly (or unsafe Go) reading or writing one element
// past the end, or before the start, faults at once instead of passing
// unseen on whatever memory lies next to the slice. With
// debug.SetPanicOnFault(true) the fault is a panic the test can recover
// and report.
//
// Each slice is its own mapping: a whole number of pages for the data,
// with a PROT_NONE page on each side, and the data placed flush against
// the page after it (AtEnd) or the page before it (AtStart).
package guardmem

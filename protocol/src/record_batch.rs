//! Record batch v2: layout, validation, offset assignment. (in progress)

//! The default store, named once: SQLite, embedded, the store of a plain `Queue` and of
//! `Queue::builder()`. Code above the seam names SQLite only through this file.

/// The store a [`Queue`](crate::Queue) uses unless it names another: SQLite.
pub type DefaultStore = super::sqlite::SqliteStore;

/// The options a [`QueueBuilder`](crate::QueueBuilder) starts with: SQLite's.
pub type DefaultOptions = super::sqlite::SqliteOptions;

/// The default store's durability setting, which the default builder's `synchronous` takes.
pub use super::sqlite::Synchronous;

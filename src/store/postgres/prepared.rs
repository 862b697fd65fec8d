//! The store's statements as queries the server parses and plans once per connection.
//!
//! diesel never prepares a raw `sql_query`: it marks it unsafe to cache, so the server would
//! parse, analyse and plan every statement of the store on every call (for the claim and the
//! batched settle that is most of what the server does for them while the queue is small).
//! [`Prepared`] is a statement's fixed text with its parameters bound, which diesel's
//! statement cache keeps as a named prepared statement of the connection, keyed by the text
//! and the parameters' types. The store's sessions still have the server plan each call
//! for its values (`plan_cache_mode = force_custom_plan`, see `session_settings`): what is
//! saved is the parse and the analysis. A connection of the caller's own (`PgTx::new`) may
//! keep a generic plan after five runs; the plan tests check the hot statements' plans both
//! ways.
//!
//! The text keeps its own `$n` placeholders. diesel numbers a parameter as it is pushed and
//! writes its placeholder where it is pushed, so the parameters are pushed, in order, into
//! a comment after the statement (`/* $1 $2 */`): the server reads the statement's text as
//! written and takes the values in that order. A statement may then use a parameter twice,
//! or in any order.
//!
//! [`PostgresOptions::prepared_statements`](crate::PostgresOptions::prepared_statements)
//! turns the cache off for the store's connections (for a pooler that does not keep a
//! session's prepared statements), and each statement is then sent unnamed, as before.

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{HasSqlType, Untyped};
use diesel::{PgConnection, QueryResult, RunQueryDsl};
use std::marker::PhantomData;

/// A statement's text and the values bound to its parameters, in order.
pub(crate) struct Prepared<'a> {
    sql: &'static str,
    binds: Vec<Box<dyn PushBind + Send + 'a>>,
}

impl<'a> Prepared<'a> {
    /// `sql`, with no value bound yet.
    pub(crate) fn new(sql: &'static str) -> Self {
        Prepared { sql, binds: Vec::new() }
    }

    /// Binds the next parameter (`$1`, then `$2`, …) to `value`, sent as SQL type `T`.
    pub(crate) fn bind<T, V>(mut self, value: V) -> Self
    where
        Pg: HasSqlType<T>,
        V: ToSql<T, Pg> + Send + 'a,
        T: Send + 'a,
    {
        self.binds.push(Box::new(Value::<T, V> { value, sql_type: PhantomData }));
        self
    }
}

/// One bound value, with its SQL type.
trait PushBind {
    fn push<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()>;
}

struct Value<T, V> {
    value: V,
    sql_type: PhantomData<fn() -> T>,
}

impl<T, V> PushBind for Value<T, V>
where
    Pg: HasSqlType<T>,
    V: ToSql<T, Pg>,
{
    fn push<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_bind_param::<T, V>(&self.value)
    }
}

impl QueryFragment<Pg> for Prepared<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(self.sql);
        if !self.binds.is_empty() {
            out.push_sql("\n/*");
            for bind in &self.binds {
                out.push_sql(" ");
                bind.push(&mut out)?;
            }
            out.push_sql(" */");
        }
        Ok(())
    }
}

/// No static id: the statement cache keys each statement by its text and its parameters'
/// types.
impl QueryId for Prepared<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

/// Rows are read by column name (`QueryableByName`), as from `sql_query`.
impl Query for Prepared<'_> {
    type SqlType = Untyped;
}

impl RunQueryDsl<PgConnection> for Prepared<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::debug_query;
    use diesel::sql_types::{BigInt, Text};

    #[test]
    fn the_text_is_kept_and_the_parameters_follow_it_in_a_comment() {
        let query =
            Prepared::new("SELECT $2::text AS a WHERE $1 > 0 AND $1 < 9").bind::<BigInt, _>(5_i64).bind::<Text, _>("x");
        let shown = debug_query::<Pg, _>(&query).to_string();
        assert!(
            shown.starts_with("SELECT $2::text AS a WHERE $1 > 0 AND $1 < 9\n/* $1 $2 */"),
            "the text as written, then one placeholder per bound value in order: {shown}"
        );
        assert!(shown.contains("binds: [5, \"x\"]"), "the values in order: {shown}");
    }

    #[test]
    fn a_statement_without_parameters_is_its_text_alone() {
        let shown = debug_query::<Pg, _>(&Prepared::new("SELECT 1")).to_string();
        assert!(shown.starts_with("SELECT 1 -- binds: []"), "{shown}");
    }
}

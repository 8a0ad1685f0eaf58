//! What a search asks for and what it returns: the query, filters, mode, fusion and hits.

use chrono::{DateTime, Utc};
use memtape_core::{AsOf, EntryId, Kind, Role, Scope};

/// Which entries a search may return. The tenant is always fixed; the other parts of the
/// scope narrow it when given (an agent, its user, one session).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchFilter {
    /// The tenant searched.
    pub tenant: String,
    /// Only this agent's entries.
    pub agent: Option<String>,
    /// Only entries of this user (of any agent, unless `agent` is set too).
    pub user: Option<String>,
    /// Only this session's entries.
    pub session: Option<String>,
    /// Only these kinds (all when empty).
    pub kinds: Vec<Kind>,
    /// Only messages with these roles (all entries when empty; events have no role).
    pub roles: Vec<Role>,
    /// Only entries written at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only entries written before this time.
    pub until: Option<DateTime<Utc>>,
    /// Only entries that existed at this moment (time travel).
    pub as_of: Option<AsOf>,
}

impl SearchFilter {
    /// Everything of `tenant`.
    pub fn tenant(tenant: impl Into<String>) -> Self {
        SearchFilter {
            tenant: tenant.into(),
            ..Self::default()
        }
    }

    /// Everything in `scope` and below it: an agent scope covers its users and sessions,
    /// a session scope covers its nodes.
    pub fn within(scope: &Scope) -> Self {
        SearchFilter {
            tenant: scope.tenant().to_owned(),
            agent: Some(scope.agent_name().to_owned()),
            user: scope.user().map(str::to_owned),
            session: scope.session().map(str::to_owned),
            ..Self::default()
        }
    }

    /// Whether entries of `scope` pass the scope part of this filter.
    pub fn admits_scope(&self, scope: &Scope) -> bool {
        scope.tenant() == self.tenant
            && self
                .agent
                .as_deref()
                .is_none_or(|a| a == scope.agent_name())
            && self.user.as_deref().is_none_or(|u| Some(u) == scope.user())
            && self
                .session
                .as_deref()
                .is_none_or(|s| Some(s) == scope.session())
    }

    /// Whether entry `id`, of `kind` and `role`, written at `at`, passes the rest of the
    /// filter.
    pub fn admits(&self, id: EntryId, kind: Kind, role: Option<Role>, at: DateTime<Utc>) -> bool {
        self.as_of.is_none_or(|m| m.includes(id, at))
            && (self.kinds.is_empty() || self.kinds.contains(&kind))
            && (self.roles.is_empty() || role.is_some_and(|r| self.roles.contains(&r)))
            && self.since.is_none_or(|s| at >= s)
            && self.until.is_none_or(|u| at < u)
    }
}

/// Which retrievers a search uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Full-text BM25 only.
    Bm25,
    /// Embedding similarity only.
    Vector,
    /// Both, fused.
    #[default]
    Hybrid,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bm25" => Ok(Mode::Bm25),
            "vector" => Ok(Mode::Vector),
            "hybrid" => Ok(Mode::Hybrid),
            other => Err(format!(
                "unknown search mode {other:?} (expected bm25, vector or hybrid)"
            )),
        }
    }
}

impl Mode {
    /// The mode's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Bm25 => "bm25",
            Mode::Vector => "vector",
            Mode::Hybrid => "hybrid",
        }
    }
}

/// How hybrid search merges the two ranked lists.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fusion {
    /// Reciprocal rank fusion: `bm25_weight / (k + bm25 rank) + (1 − bm25_weight) /
    /// (k + vector rank)`, ranks from 1; a list a hit is missing from adds nothing.
    Rrf {
        /// The rank offset; 60 is the usual choice.
        k: f32,
        /// The weight of the BM25 list, between 0 and 1 (0.5 is plain RRF).
        bm25_weight: f32,
    },
    /// Weighted score fusion: each list's scores are min-max normalised over its
    /// candidates, then mixed as `bm25_weight × bm25 + (1 − bm25_weight) × vector`.
    Weighted {
        /// The weight of the BM25 score, between 0 and 1.
        bm25_weight: f32,
    },
    /// Weighted score fusion whose weights follow, per query, how decisive each list is:
    /// a list whose best hits stand out from the rest of its top ten (normalised as in
    /// [`Fusion::Weighted`]) counts for more than one whose top ten score alike. The
    /// weights are `bm25_weight × d_bm25` and `(1 − bm25_weight) × d_vector`, rescaled to
    /// sum to 1, where `d` is 1 minus the mean normalised score of a list's hits 2 to 10.
    Adaptive {
        /// The weight of the BM25 score before the lists' decisiveness, between 0 and 1.
        bm25_weight: f32,
    },
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Rrf {
            k: 60.0,
            bm25_weight: 0.5,
        }
    }
}

/// One search.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchRequest {
    /// The query text.
    pub text: String,
    /// Which entries may be returned.
    pub filter: SearchFilter,
    /// How many hits at most.
    pub limit: usize,
    /// Which retrievers to use.
    pub mode: Mode,
    /// Compare the query with every vector, however large the index (slower; for
    /// measuring what the approximate scan misses).
    pub exact: bool,
}

/// The longest query text a search takes, in bytes (8 KiB: a paragraph; a search is for
/// the words that matter, and every cost of a search grows with its query).
pub const MAX_QUERY_BYTES: usize = 8 * 1024;

impl SearchRequest {
    /// Refuses a query over [`MAX_QUERY_BYTES`].
    pub fn check(&self) -> crate::Result<()> {
        if self.text.len() > MAX_QUERY_BYTES {
            return Err(crate::Error::QueryTooLong {
                bytes: self.text.len(),
                max: MAX_QUERY_BYTES,
            });
        }
        Ok(())
    }

    /// A hybrid search for `text` under `filter`, returning 10 hits.
    pub fn new(text: impl Into<String>, filter: SearchFilter) -> Self {
        SearchRequest {
            text: text.into(),
            filter,
            limit: 10,
            mode: Mode::Hybrid,
            exact: false,
        }
    }

    /// The same search with another limit.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The same search in another mode.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
}

/// Where a hit stood in one retriever's list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranked {
    /// Its rank, from 1.
    pub rank: usize,
    /// The retriever's own score (BM25 score, higher is better; or cosine similarity).
    pub score: f32,
}

/// One result.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// The entry found.
    pub id: EntryId,
    /// Its final score (higher is better; comparable only within one search).
    pub score: f32,
    /// Its place in the BM25 list, if it was there.
    pub bm25: Option<Ranked>,
    /// Its place in the vector list, if it was there.
    pub vector: Option<Ranked>,
}

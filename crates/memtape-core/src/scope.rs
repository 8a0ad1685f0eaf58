//! Scopes: where an entry belongs — tenant → agent → user → session → node.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

const MAX_NAME_LEN: usize = 256;

/// The scope of an entry. Tenant and agent are always present; user is optional (memory
/// shared by all users of an agent has none); session marks conversation scope; node marks
/// Dify-style node memory inside a session and requires one.
///
/// Fields are private so that every `Scope` in the program is valid: build one with
/// [`Scope::agent`] and the `with_*` methods.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Scope {
    tenant: String,
    agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
}

/// The serialized shape of a scope, validated on the way in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScope {
    tenant: String,
    agent: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    node: Option<String>,
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = RawScope::deserialize(d)?;
        Scope::from_parts(raw.tenant, raw.agent, raw.user, raw.session, raw.node)
            .map_err(serde::de::Error::custom)
    }
}

/// Checks a new name: [`check_stored`], and none of what makes names look alike
/// ([`crate::names::look_alike`]).
fn check(what: &str, value: &str) -> Result<()> {
    check_stored(what, value)?;
    if let Some(why) = crate::names::look_alike(value) {
        return Err(Error::InvalidScope(format!("{what} {value:?} {why}")));
    }
    Ok(())
}

/// The rules every stored name already follows: not empty, not too long, no control
/// character.
fn check_stored(what: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::InvalidScope(format!("{what} is empty")));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(Error::InvalidScope(format!(
            "{what} is {} bytes long (at most {MAX_NAME_LEN})",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::InvalidScope(format!(
            "{what} {value:?} contains a control character"
        )));
    }
    Ok(())
}

impl Scope {
    /// The agent scope `tenant/agent`: memory shared by all of the agent's users and sessions.
    pub fn agent(tenant: impl Into<String>, agent: impl Into<String>) -> Result<Self> {
        Self::from_parts(tenant.into(), agent.into(), None, None, None)
    }

    /// The agent scope this scope belongs to (`tenant/agent`, whatever user, session or
    /// node it names).
    pub fn agent_scope(&self) -> Scope {
        Scope {
            tenant: self.tenant.clone(),
            agent: self.agent.clone(),
            user: None,
            session: None,
            node: None,
        }
    }

    /// Builds a scope from its parts, checking every rule: each name is taken in Unicode's
    /// composed form (NFC) and may not look like another ([`crate::names`]).
    pub fn from_parts(
        tenant: String,
        agent: String,
        user: Option<String>,
        session: Option<String>,
        node: Option<String>,
    ) -> Result<Self> {
        let nfc = |name: String| match crate::names::nfc(&name) {
            std::borrow::Cow::Owned(composed) => composed,
            std::borrow::Cow::Borrowed(_) => name,
        };
        let (tenant, agent) = (nfc(tenant), nfc(agent));
        let (user, session, node) = (user.map(nfc), session.map(nfc), node.map(nfc));
        Self::build(tenant, agent, user, session, node, check)
    }

    /// Builds a scope a store holds already: names an older memtape accepted keep working
    /// as they were written (read, listed, exported), even where today's look-alike rule
    /// would refuse them as new names.
    pub fn from_stored(
        tenant: String,
        agent: String,
        user: Option<String>,
        session: Option<String>,
        node: Option<String>,
    ) -> Result<Self> {
        Self::build(tenant, agent, user, session, node, check_stored)
    }

    fn build(
        tenant: String,
        agent: String,
        user: Option<String>,
        session: Option<String>,
        node: Option<String>,
        check: fn(&str, &str) -> Result<()>,
    ) -> Result<Self> {
        check("tenant", &tenant)?;
        check("agent", &agent)?;
        if let Some(u) = &user {
            check("user", u)?;
        }
        if let Some(s) = &session {
            check("session", s)?;
        }
        if let Some(n) = &node {
            check("node", n)?;
            if session.is_none() {
                return Err(Error::InvalidScope(format!(
                    "node {n:?} needs a session: node memory lives inside a conversation"
                )));
            }
        }
        Ok(Self {
            tenant,
            agent,
            user,
            session,
            node,
        })
    }

    /// This scope narrowed to a user.
    pub fn with_user(self, user: impl Into<String>) -> Result<Self> {
        Self::from_parts(
            self.tenant,
            self.agent,
            Some(user.into()),
            self.session,
            self.node,
        )
    }

    /// This scope narrowed to a session (conversation).
    pub fn with_session(self, session: impl Into<String>) -> Result<Self> {
        Self::from_parts(
            self.tenant,
            self.agent,
            self.user,
            Some(session.into()),
            self.node,
        )
    }

    /// This scope narrowed to a node inside its session.
    pub fn with_node(self, node: impl Into<String>) -> Result<Self> {
        Self::from_parts(
            self.tenant,
            self.agent,
            self.user,
            self.session,
            Some(node.into()),
        )
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    /// The agent.
    pub fn agent_name(&self) -> &str {
        &self.agent
    }
    /// The user, if the scope is narrowed to one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }
    /// The session, if this is a conversation (or node) scope.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }
    /// The node, if this is a node scope.
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// Whether `other` lies within this scope: the same tenant and agent, and the same
    /// user, session and node wherever this scope names one. An agent scope holds its
    /// users', sessions' and nodes' scopes; a user's scope holds only that user's. This is
    /// the access rule of every read that is given a scope.
    pub fn contains(&self, other: &Scope) -> bool {
        let within =
            |mine: &Option<String>, theirs: &Option<String>| mine.is_none() || mine == theirs;
        self.tenant == other.tenant
            && self.agent == other.agent
            && within(&self.user, &other.user)
            && within(&self.session, &other.session)
            && within(&self.node, &other.node)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.tenant, self.agent)?;
        if let Some(u) = &self.user {
            write!(f, " user={u}")?;
        }
        if let Some(s) = &self.session {
            write!(f, " session={s}")?;
        }
        if let Some(n) = &self.node {
            write!(f, " node={n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31, section 6: a new name is taken composed (NFC) and may not look like
    /// another; a stored one is read as it was written.
    #[test]
    fn new_names_are_composed_and_may_not_look_alike() {
        let decomposed = Scope::agent("t", "cafe\u{301}").unwrap();
        assert_eq!(decomposed, Scope::agent("t", "caf\u{e9}").unwrap());
        for bad in [" bob", "bob ", "b\u{202E}ob", "b\u{200B}ob", "\u{FEFF}bob"] {
            let err = Scope::agent("t", "a")
                .unwrap()
                .with_session(bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains("session"), "{err}");
            let stored = Scope::from_stored("t".into(), "a".into(), None, Some(bad.into()), None);
            assert_eq!(stored.unwrap().session(), Some(bad));
        }
    }

    #[test]
    fn node_without_session_is_a_configuration_error() {
        let err = Scope::agent("t", "a")
            .unwrap()
            .with_node("llm1")
            .unwrap_err();
        assert!(err.to_string().contains("needs a session"), "{err}");
    }

    #[test]
    fn empty_and_control_names_are_refused() {
        assert!(Scope::agent("", "a").is_err());
        assert!(Scope::agent("t", "a\n").is_err());
        assert!(
            Scope::agent("t", "a")
                .unwrap()
                .with_session("x".repeat(300))
                .is_err()
        );
    }

    #[test]
    fn a_scope_contains_its_narrower_scopes_only() {
        let agent = Scope::agent("t", "a").unwrap();
        let u1 = agent.clone().with_user("u1").unwrap();
        let u1_chat = u1.clone().with_session("s").unwrap();
        let u2_chat = agent
            .clone()
            .with_user("u2")
            .unwrap()
            .with_session("s")
            .unwrap();
        assert!(agent.contains(&u1_chat) && agent.contains(&agent));
        assert!(u1.contains(&u1_chat) && !u1.contains(&u2_chat));
        // The agent's own memory is not the user's.
        assert!(!u1.contains(&agent));
        assert!(!agent.contains(&Scope::agent("t", "b").unwrap()));
        assert!(!agent.contains(&Scope::agent("t2", "a").unwrap()));
    }

    #[test]
    fn deserializing_checks_the_rules() {
        let bad = r#"{"tenant":"t","agent":"a","node":"n"}"#;
        assert!(serde_json::from_str::<Scope>(bad).is_err());
        let good = r#"{"tenant":"t","agent":"a","session":"s"}"#;
        let s: Scope = serde_json::from_str(good).unwrap();
        assert_eq!(s.session(), Some("s"));
        assert_eq!(serde_json::to_string(&s).unwrap(), good);
    }
}

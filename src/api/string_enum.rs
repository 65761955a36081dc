//! A string enumeration that keeps values it does not know.
//!
//! Kubernetes enumerations are open: a newer MCM or CAPI may write a phase we have never seen. Failing to
//! deserialize would make the whole object unreadable, so unknown values are kept verbatim in `Other`.

/// Declares `pub enum $name { $variant, ..., Other(String) }` serialized as a plain string.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* #[doc = concat!("`", $text, "`")] $variant,)+
            /// A value this version does not know, kept as written.
            Other(String),
        }

        impl $name {
            /// Every value this version knows, in declaration order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// The value as written on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($text => $name::$variant,)+
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match $name::from(s.as_str()) {
                    $name::Other(_) => $name::Other(s),
                    known => known,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok(String::deserialize(d)?.into())
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string" })
            }
        }
    };
}

pub(crate) use string_enum;

#[cfg(test)]
mod tests {
    string_enum!(
        /// Test enum.
        Colour { Red = "Red", Green = "Green" }
    );

    #[test]
    fn known_and_unknown_values_round_trip() {
        for text in ["Red", "Green", "Mauve", ""] {
            let v: Colour = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(serde_json::to_value(&v).unwrap(), serde_json::json!(text));
        }
        assert_eq!(Colour::from("Red"), Colour::Red);
        assert_eq!(Colour::from("Mauve"), Colour::Other("Mauve".into()));
        assert_eq!(Colour::KNOWN.len(), 2);
    }
}

//! Path parameters as the types their routes describe: a handler takes `PathParam<T>` where
//! `T` is the enum of the values the route serves (with serde's names, the same the OpenAPI
//! document lists), so the described type is the one the handler matches on. A segment that is
//! none of them is the route's own answer ([`PathValue::refused`]), as upstream words it.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::{DeserializeOwned, IntoDeserializer};

use super::error::ApiError;

/// A type one path segment names.
pub trait PathValue: DeserializeOwned {
    /// The answer to a segment that names none of the type's values.
    fn refused(text: &str) -> ApiError;
}

/// The route's one path parameter, as a `T`.
pub struct PathParam<T>(pub T);

impl<S: Send + Sync, T: PathValue> FromRequestParts<S> for PathParam<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let value: Result<T, serde::de::value::Error> =
            T::deserialize(text.as_str().into_deserializer());
        value
            .map(PathParam)
            .map_err(|_| T::refused(&text).into_response())
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(rename_all = "kebab-case")]
    enum Colour {
        Red,
        DarkBlue,
    }

    impl PathValue for Colour {
        fn refused(text: &str) -> ApiError {
            ApiError::BadRequest(format!("no colour '{text}'"))
        }
    }

    async fn answer(path: &str) -> (StatusCode, String) {
        let router = Router::new().route(
            "/colours/{colour}",
            get(|PathParam(c): PathParam<Colour>| async move { format!("{c:?}") }),
        );
        let request = Request::get(path).body(Body::empty()).expect("request");
        let response = router.oneshot(request).await.expect("infallible");
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_segment_is_one_of_the_types_values_or_the_types_refusal() {
        let check = [
            ("/colours/red", StatusCode::OK, "Red"),
            ("/colours/dark-blue", StatusCode::OK, "DarkBlue"),
            ("/colours/%72ed", StatusCode::OK, "Red"),
            ("/colours/Red", StatusCode::BAD_REQUEST, "no colour 'Red'\n"),
            (
                "/colours/x%20y",
                StatusCode::BAD_REQUEST,
                "no colour 'x y'\n",
            ),
        ];
        for (path, status, body) in check {
            assert_eq!(answer(path).await, (status, body.to_owned()), "{path}");
        }
    }
}

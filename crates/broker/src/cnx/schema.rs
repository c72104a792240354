//! The schema registry on a connection: GET_SCHEMA and GET_OR_CREATE_SCHEMA.

use bytes::Bytes;
use strobe_model::TopicName;
use strobe_wire::proto;
use strobe_wire::{Command, commands};

use super::ServerCnx;
use crate::BrokerError;
use crate::security::Operation;

impl ServerCnx {
    pub(super) async fn schema_reply(
        &self,
        c: &proto::CommandGetSchema,
    ) -> Result<Command, BrokerError> {
        let (v, s) = self.get_schema(c).await?;
        Ok(commands::get_schema_response(
            c.request_id,
            crate::schemas::to_wire(&c.topic, &s),
            Bytes::copy_from_slice(&v.to_bytes()),
        ))
    }

    pub(super) async fn get_or_create_schema_reply(
        &self,
        c: &proto::CommandGetOrCreateSchema,
    ) -> Result<Command, BrokerError> {
        let v = self.get_or_create_schema(c).await?;
        Ok(commands::get_or_create_schema_response(
            c.request_id,
            Bytes::copy_from_slice(&v.to_bytes()),
        ))
    }

    pub(super) async fn get_schema(
        &self,
        c: &proto::CommandGetSchema,
    ) -> Result<(strobe_schema::SchemaVersion, strobe_schema::SchemaData), BrokerError> {
        let topic = TopicName::parse(&c.topic)?;
        self.service
            .authorize(self.role(), Operation::Lookup(&topic))
            .await?;
        let version = c
            .schema_version
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(strobe_schema::SchemaVersion::from_bytes)
            .transpose()
            .map_err(crate::schemas::schema_err)?;
        let (v, s, _) = self.service.schemas.get_schema(&topic, version).await?;
        Ok((v, s))
    }

    pub(super) async fn get_or_create_schema(
        &self,
        c: &proto::CommandGetOrCreateSchema,
    ) -> Result<strobe_schema::SchemaVersion, BrokerError> {
        let topic = TopicName::parse(&c.topic)?;
        self.service
            .authorize(self.role(), Operation::Produce(&topic))
            .await?;
        let schema = crate::schemas::from_wire(&c.schema)?;
        self.service
            .schemas
            .producer_schema(&topic, Some(&schema))
            .await
            .map(|v| v.expect("a schema was given"))
    }
}

"""The schema registry with the official client: Avro and JSON records
registered by producers and consumers, versions, the namespace's compatibility
strategy deciding evolutions, IncompatibleSchema with its reason, and the
/admin/v2/schemas endpoints."""
import json

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from test_admin import call


class User(Record):
    name = String()
    age = Integer()


class UserV2(Record):
    name = String()
    age = Integer()
    email = String(required_default=True)  # written with "default": null


class Renamed(Record):
    login = String(required=True)


def schema_path(local):
    return f"/admin/v2/schemas/public/default/{local}/schema"


def test_avro_roundtrip_and_rest(strobe, client):
    local = "schemas-avro"
    topic = f"persistent://public/default/{local}"
    consumer = client.subscribe(topic, "s", schema=AvroSchema(User))
    producer = client.create_producer(topic, schema=AvroSchema(User))
    producer.send(User(name="ada", age=36))
    msg = consumer.receive(5000)
    assert msg.value().name == "ada" and msg.value().age == 36
    status, body = call(strobe, "GET", schema_path(local))
    assert status == 200 and body["type"] == "AVRO" and body["version"] == 0
    assert json.loads(body["data"])["fields"][0]["name"] == "name"
    # The same schema again is the same version: nothing new is stored.
    client.create_producer(topic, schema=AvroSchema(User)).close()
    assert len(call(strobe, "GET", f"/admin/v2/schemas/public/default/{local}/schemas")[1]["getSchemaResponses"]) == 1
    assert call(strobe, "GET", f"{schema_path(local)}/0")[1]["type"] == "AVRO"
    assert call(strobe, "GET", f"{schema_path(local)}/7")[0] == 404


def test_incompatible_producer_is_refused_with_a_reason(strobe, client):
    local = "schemas-incompatible"
    topic = f"persistent://public/default/{local}"
    client.create_producer(topic, schema=AvroSchema(User)).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(Renamed))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(User))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "wrong", schema=AvroSchema(Renamed))
    # The REST check says why.
    payload = {"type": "AVRO", "schema": AvroSchema(Renamed).schema_info().schema(), "properties": {}}
    status, body = call(strobe, "POST", f"/admin/v2/schemas/public/default/{local}/compatibility", payload)
    assert status == 200 and body["isCompatibility"] is False
    assert body["schemaCompatibilityStrategy"] == "FULL"
    status, body = call(strobe, "POST", schema_path(local), payload)
    assert status == 409 and body["reason"]


def test_strategy_decides_evolution(strobe, client):
    ns = "/admin/v2/namespaces/public/default-schemas"
    assert call(strobe, "PUT", ns)[0] == 204
    local = "evolve"
    topic = f"persistent://public/default-schemas/{local}"
    client.create_producer(topic, schema=AvroSchema(User)).close()
    # Adding a field without a default breaks FULL (old data has no email).
    class NoDefault(Record):
        name = String()
        age = Integer()
        email = String()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(NoDefault))
    # Adding a field with a default is compatible both ways: a new version.
    p2 = client.create_producer(topic, schema=AvroSchema(UserV2))
    p2.send(UserV2(name="bob", age=1))
    versions = call(strobe, "GET", f"/admin/v2/schemas/public/default-schemas/{local}/schemas")[1]
    assert [v["version"] for v in versions["getSchemaResponses"]] == [0, 1]
    # ALWAYS_INCOMPATIBLE refuses any new schema; ALWAYS_COMPATIBLE takes one.
    assert call(strobe, "PUT", f"{ns}/schemaCompatibilityStrategy", b'"ALWAYS_INCOMPATIBLE"')[0] == 204
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(Renamed))
    assert call(strobe, "PUT", f"{ns}/schemaCompatibilityStrategy", b'"ALWAYS_COMPATIBLE"')[0] == 204
    client.create_producer(topic, schema=AvroSchema(Renamed)).close()
    # With auto-update off, only a schema the topic already has is accepted.
    assert call(strobe, "POST", f"{ns}/isAllowAutoUpdateSchema", b"false")[0] == 204
    client.create_producer(topic, schema=AvroSchema(User)).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(User))
    assert call(strobe, "POST", f"{ns}/isAllowAutoUpdateSchema", b"true")[0] == 204


def test_delete_then_a_new_type(strobe, client):
    local = "schemas-delete"
    topic = f"persistent://public/default/{local}"
    client.create_producer(topic, schema=StringSchema()).close()
    assert call(strobe, "GET", schema_path(local))[1]["type"] == "STRING"
    assert call(strobe, "DELETE", schema_path(local))[0] == 200
    assert call(strobe, "GET", schema_path(local))[0] == 404
    # After the deletion, any schema is accepted, under a later version.
    client.create_producer(topic, schema=JsonSchema(User)).close()
    body = call(strobe, "GET", schema_path(local))[1]
    assert body["type"] == "JSON" and body["version"] == 2

//! ListGroups, DescribeGroups and DeleteGroups: group administration.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, ListGroupsRequest, ListGroupsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use floe_coordinator::group::state::GroupState;
use floe_protocol::response::message;

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// The operations Kafka reports for a group.
pub(super) const GROUP_OPERATIONS: &[AclOperation] =
    &[AclOperation::Read, AclOperation::Delete, AclOperation::Describe];

pub(super) fn handle_list(
    broker: &Broker,
    ctx: &RequestContext,
    request: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    let groups = match broker.groups.list_groups() {
        Ok(g) => g,
        Err(e) => return ListGroupsResponse::default().with_error_code(e.code()),
    };
    let states: Vec<String> = if version >= 4 {
        request.states_filter.iter().map(|s| s.to_lowercase()).collect()
    } else {
        Vec::new()
    };
    let types: Vec<String> = if version >= 5 {
        request.types_filter.iter().map(|s| s.to_lowercase()).collect()
    } else {
        Vec::new()
    };
    // DESCRIBE on the cluster lists every group; else the groups DESCRIBE is allowed on.
    let all = broker.authorizer.check(
        ctx,
        AclOperation::Describe,
        ResourceType::Cluster,
        crate::authorizer::acl::CLUSTER_NAME,
    );
    let listed = groups
        .into_iter()
        .filter(|g| {
            all || broker.authorizer.check(
                ctx,
                AclOperation::Describe,
                ResourceType::Group,
                &g.group_id,
            )
        })
        .filter(|g| states.is_empty() || states.contains(&g.state_name.to_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.group_type))
        .map(|g| {
            let mut l = ListedGroup::default()
                .with_group_id(GroupId(s(g.group_id)))
                .with_protocol_type(s(g.protocol_type));
            if version >= 4 {
                l.group_state = s(g.state_name);
            }
            if version >= 5 {
                l.group_type = s(g.group_type);
            }
            l
        })
        .collect();
    ListGroupsResponse::default().with_groups(listed)
}

pub(super) fn handle_describe(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let groups = request
        .groups
        .into_iter()
        .map(|id| {
            let mut d = DescribedGroup::default().with_group_id(id.clone());
            if version >= 3 {
                d.authorized_operations = if request.include_authorized_operations {
                    broker.authorizer.authorized_operations(
                        ctx,
                        ResourceType::Group,
                        id.as_str(),
                        GROUP_OPERATIONS,
                    )
                } else {
                    i32::MIN
                };
            }
            if !broker.authorizer.authorize(
                ctx,
                AclOperation::Describe,
                ResourceType::Group,
                id.as_str(),
            ) {
                return d.with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            match broker.groups.of(id.as_str()).describe_group(id.as_str()) {
                Err(e) => d.with_error_code(e.code()),
                Ok(None) if version >= 6 => d
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(message(format!("group {} not found", id.as_str())))
                    .with_group_state(s(GroupState::Dead.name())),
                Ok(None) => d.with_group_state(s(GroupState::Dead.name())),
                Ok(Some(summary)) => {
                    let members = summary
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut dm = DescribedGroupMember::default()
                                .with_member_id(s(m.member_id))
                                .with_client_id(s(m.client_id))
                                .with_client_host(s(m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment);
                            if version >= 4 {
                                dm.group_instance_id = m.instance_id.map(s);
                            }
                            dm
                        })
                        .collect();
                    d.with_group_state(s(summary.state_name))
                        .with_protocol_type(s(summary.protocol_type))
                        .with_protocol_data(s(summary.protocol))
                        .with_members(members)
                }
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub(super) async fn handle_delete(
    broker: &Broker,
    ctx: &RequestContext,
    request: DeleteGroupsRequest,
    _version: i16,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for id in request.groups_names {
        let e = if broker.authorizer.authorize(
            ctx,
            AclOperation::Delete,
            ResourceType::Group,
            id.as_str(),
        ) {
            broker.groups.of(id.as_str()).delete_group(id.as_str()).await.err()
        } else {
            Some(ResponseError::GroupAuthorizationFailed)
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(e.map_or(0, |e| e.code())),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}

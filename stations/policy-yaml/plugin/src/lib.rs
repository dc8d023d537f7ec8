//! Exports `aegis-policy-yaml` as a loadable plugin library.
aegis_station_api::export_root!(aegis_policy_yaml::plugin_module);

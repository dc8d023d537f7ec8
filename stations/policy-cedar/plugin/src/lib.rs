//! Exports `aegis-policy-cedar` as a loadable plugin library.
aegis_station_api::export_root!(aegis_policy_cedar::plugin_module);
